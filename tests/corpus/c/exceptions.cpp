// Exceptions: throw (__cxa_throw), try/catch by type (invoke, landingpad with catch clauses,
// typeinfo), cleanups that run destructors (landingpad cleanup, resume), rethrow, noexcept.
#include <stdexcept>

struct Guard {
    int *counter;
    explicit Guard(int *c) : counter(c) { ++*counter; }
    ~Guard() { --*counter; }
};

struct MyError { int code; };

double checked_sqrt(double x) {
    if (x < 0) throw std::domain_error("negative");
    double r = x;
    for (int i = 0; i < 20; i++) r = 0.5 * (r + x / r);
    return r;
}

__attribute__((noinline)) void maybe_throw(int k) {
    if (k == 1) throw MyError{42};
    if (k == 2) throw std::out_of_range("k");
    if (k == 3) throw 3.5;
}

int classify(int k) {
    int live = 0;
    try {
        Guard g(&live);
        maybe_throw(k);
        return 0;
    } catch (const MyError &e) {
        return e.code + live;
    } catch (const std::logic_error &e) {
        return 2;
    } catch (double d) {
        return (int)d;
    } catch (...) {
        return -1;
    }
}

int cleanup_only(int k, int *live) {
    Guard a(live);
    Guard b(live);
    maybe_throw(k);
    return *live;
}

int rethrow(int k) {
    try {
        try {
            maybe_throw(k);
        } catch (MyError &e) {
            e.code++;
            throw;
        }
    } catch (MyError &e) {
        return e.code;
    }
    return 0;
}

double safe_sum(const double *x, int n) noexcept {
    double s = 0;
    for (int i = 0; i < n; i++) s += checked_sqrt(x[i]);
    return s;
}

double recover(double x) {
    try {
        return checked_sqrt(x);
    } catch (const std::exception &e) {
        return -1.0;
    }
}
