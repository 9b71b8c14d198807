// The C++ standard library (zig's libc++): vector, array, algorithm, numeric, unique_ptr,
// complex, pair/tuple, optional.
#include <algorithm>
#include <array>
#include <complex>
#include <memory>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

double vector_stats(const double *x, int n) {
    std::vector<double> v(x, x + n);
    std::sort(v.begin(), v.end());
    double sum = std::accumulate(v.begin(), v.end(), 0.0);
    double median = v.empty() ? 0.0 : v[v.size() / 2];
    auto [mn, mx] = std::minmax_element(v.begin(), v.end());
    return sum + median + (v.empty() ? 0.0 : *mx - *mn);
}

double push_loop(int n) {
    std::vector<double> v;
    v.reserve(4);
    for (int i = 0; i < n; i++) v.push_back(i * 0.5);
    v.erase(std::remove_if(v.begin(), v.end(), [](double d) { return d > 10.0; }), v.end());
    return std::inner_product(v.begin(), v.end(), v.begin(), 0.0);
}

double array_sum(double x) {
    std::array<double, 5> a{x, 2 * x, 3 * x, 4 * x, 5 * x};
    std::reverse(a.begin(), a.end());
    return std::accumulate(a.begin(), a.end(), 0.0) + a.front();
}

struct Node { double v; std::unique_ptr<Node> next; };
double owned_list(int n) {
    std::unique_ptr<Node> head;
    for (int i = 0; i < n; i++) head = std::make_unique<Node>(Node{double(i), std::move(head)});
    double s = 0;
    for (Node *p = head.get(); p; p = p->next.get()) s += p->v;
    return s;
}

std::complex<double> complex_poly(std::complex<double> z) { return z * z + std::exp(z) - 1.0; }

std::optional<double> safe_div(double a, double b) {
    if (b == 0) return std::nullopt;
    return a / b;
}

double use_optional(double a, double b) { return safe_div(a, b).value_or(-1.0); }

std::tuple<int, double> split(double x) { return {int(x), x - int(x)}; }
double use_tuple(double x) { auto [i, f] = split(x); return i * 10 + f; }
