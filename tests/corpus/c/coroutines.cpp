// pyzyme-corpus-flags: -std=c++20
// C++20 coroutines: a generator (llvm.coro.* intrinsics, token values, resume/destroy
// functions after CoroSplit at -O2).
#include <coroutine>
#include <exception>

struct Generator {
    struct promise_type {
        double current = 0;
        Generator get_return_object() { return Generator{std::coroutine_handle<promise_type>::from_promise(*this)}; }
        std::suspend_always initial_suspend() noexcept { return {}; }
        std::suspend_always final_suspend() noexcept { return {}; }
        std::suspend_always yield_value(double v) noexcept { current = v; return {}; }
        void return_void() noexcept {}
        void unhandled_exception() { std::terminate(); }
    };
    std::coroutine_handle<promise_type> h;
    explicit Generator(std::coroutine_handle<promise_type> h) : h(h) {}
    Generator(Generator &&o) noexcept : h(o.h) { o.h = nullptr; }
    ~Generator() { if (h) h.destroy(); }
    bool next() { h.resume(); return !h.done(); }
    double value() const { return h.promise().current; }
};

Generator geometric(double r, int n) {
    double v = 1.0;
    for (int i = 0; i < n; i++) { co_yield v; v *= r; }
}

double geometric_sum(double r, int n) {
    double s = 0.0;
    auto g = geometric(r, n);
    while (g.next()) s += g.value();
    return s;
}
