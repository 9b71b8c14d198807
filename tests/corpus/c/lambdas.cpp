// Lambdas: captures by value and reference, mutable, generic lambdas, recursion through
// std::function, passing closures to templates, returning closures.
#include <functional>

template <typename F> double integrate(F f, double a, double b, int n) {
    double h = (b - a) / n, s = 0.5 * (f(a) + f(b));
    for (int i = 1; i < n; i++) s += f(a + i * h);
    return s * h;
}

double gaussian_area(double mu, double sigma) {
    auto g = [mu, sigma](double x) { double z = (x - mu) / sigma; return 1.0 / (1.0 + z * z); };
    return integrate(g, mu - 5 * sigma, mu + 5 * sigma, 200);
}

int counter_lambda(int n) {
    int calls = 0;
    auto tick = [&calls](int k) { calls += k; };
    for (int i = 0; i < n; i++) tick(i);
    auto gen = [state = 0]() mutable { return ++state; };
    gen(); gen();
    return calls + gen();
}

double generic(double x, int k) {
    auto twice = [](auto v) { return v + v; };
    return twice(x) + twice(k);
}

std::function<double(double)> make_scaler(double s) { return [s](double x) { return s * x; }; }

double use_function(double x) {
    std::function<double(double)> f = make_scaler(3.0);
    std::function<long(int)> fact = [&fact](int n) -> long { return n <= 1 ? 1 : n * fact(n - 1); };
    return f(x) + fact(6);
}

double compose_all(double x) {
    auto compose = [](auto f, auto g) { return [=](double v) { return f(g(v)); }; };
    auto inc = [](double v) { return v + 1; };
    auto dbl = [](double v) { return 2 * v; };
    return compose(inc, dbl)(x) + compose(dbl, inc)(x);
}
