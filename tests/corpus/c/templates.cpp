// Templates: function and class templates, specialisation, constexpr, variadic templates,
// CRTP, linkonce_odr instantiations in comdats.
#include <cstddef>
#include <type_traits>

template <typename T, std::size_t N>
struct Vec {
    T v[N];
    constexpr T &operator[](std::size_t i) { return v[i]; }
    constexpr const T &operator[](std::size_t i) const { return v[i]; }
    friend Vec operator+(const Vec &a, const Vec &b) {
        Vec c{};
        for (std::size_t i = 0; i < N; i++) c[i] = a[i] + b[i];
        return c;
    }
    T dot(const Vec &o) const {
        T s{};
        for (std::size_t i = 0; i < N; i++) s += v[i] * o[i];
        return s;
    }
};

template <typename T> T square(T x) { return x * x; }
template <> int square<int>(int x) { return x * x + 0; }

template <typename... Ts> auto sum_all(Ts... xs) { return (xs + ... + 0); }

template <int N> struct Fact { static constexpr long value = N * Fact<N - 1>::value; };
template <> struct Fact<0> { static constexpr long value = 1; };

template <typename Derived> struct Norm {
    double norm2() const {
        const auto &d = static_cast<const Derived &>(*this);
        double s = 0;
        for (int i = 0; i < d.size(); i++) s += d.at(i) * d.at(i);
        return s;
    }
};
struct Three : Norm<Three> {
    double x[3];
    int size() const { return 3; }
    double at(int i) const { return x[i]; }
};

template <typename T>
std::enable_if_t<std::is_floating_point_v<T>, T> halve(T x) { return x / 2; }
template <typename T>
std::enable_if_t<std::is_integral_v<T>, T> halve(T x) { return x >> 1; }

constexpr double cpow(double b, int e) { return e == 0 ? 1.0 : b * cpow(b, e - 1); }

double use_templates(double x, int k) {
    Vec<double, 4> a{{x, 1, 2, 3}}, b{{1, x, 1, x}};
    Vec<float, 3> c{{1.0f, 2.0f, 3.0f}};
    Three t;
    t.x[0] = x; t.x[1] = 2 * x; t.x[2] = 3;
    constexpr double c5 = cpow(1.5, 5);
    return (a + b).dot(b) + c.dot(c) + square(x) + square(k) + sum_all(1, 2.5, 3L) + Fact<10>::value
           + t.norm2() + halve(x) + halve(k) + c5;
}

template double square<double>(double);
template struct Vec<long, 8>;
