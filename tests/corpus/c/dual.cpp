// Operator overloading and value semantics: a forward-mode dual number type, references,
// rvalue references and move, inline friend operators, const member functions.
#include <cmath>
#include <utility>

struct Dual {
    double v, d;
    constexpr Dual(double v = 0, double d = 0) : v(v), d(d) {}
    friend Dual operator+(Dual a, Dual b) { return {a.v + b.v, a.d + b.d}; }
    friend Dual operator-(Dual a, Dual b) { return {a.v - b.v, a.d - b.d}; }
    friend Dual operator*(Dual a, Dual b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
    friend Dual operator/(Dual a, Dual b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
    Dual &operator+=(const Dual &o) { v += o.v; d += o.d; return *this; }
    bool operator<(const Dual &o) const { return v < o.v; }
};

Dual sin(Dual a) { return {std::sin(a.v), std::cos(a.v) * a.d}; }
Dual exp(Dual a) { double e = std::exp(a.v); return {e, e * a.d}; }
Dual sqrt(Dual a) { double s = std::sqrt(a.v); return {s, a.d / (2 * s)}; }

template <typename T> T model(T x, T y) { return sin(x) * exp(y) / sqrt(x * x + y * y + T(1)); }

double dmodel_dx(double x, double y) { return model(Dual(x, 1), Dual(y, 0)).d; }

Dual taylor(Dual x, int n) {
    Dual term(1), sum(1);
    for (int i = 1; i < n; i++) { term = term * x / Dual(i); sum += term; }
    return sum;
}

struct Buffer {
    double *data;
    int n;
    explicit Buffer(int n) : data(new double[n]()), n(n) {}
    Buffer(Buffer &&o) noexcept : data(std::exchange(o.data, nullptr)), n(o.n) {}
    Buffer &operator=(Buffer &&o) noexcept { std::swap(data, o.data); std::swap(n, o.n); return *this; }
    Buffer(const Buffer &) = delete;
    ~Buffer() { delete[] data; }
    double &operator[](int i) { return data[i]; }
};

double buffers(int n) {
    Buffer a(n);
    for (int i = 0; i < n; i++) a[i] = i;
    Buffer b = std::move(a);
    Buffer c(1);
    c = std::move(b);
    double s = 0;
    for (int i = 0; i < c.n; i++) s += c[i];
    return s;
}

void scale_ref(double &x, const double &s) { x *= s; }
double use_refs(double x) { double y = x; scale_ref(y, 3.0); return y; }
