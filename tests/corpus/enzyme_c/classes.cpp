// C++: a class with methods, a template, references; the Enzyme entry point a template.
#include <cmath>
#include <cstdio>

extern int enzyme_dup, enzyme_const, enzyme_out;
template <typename R, typename... Args> R __enzyme_autodiff(Args...);
static int failures = 0;
#define APPROX_EQ(a, b) \
  do { if (std::fabs((a) - (b)) > 1e-12 * (1 + std::fabs(b))) { \
    std::fprintf(stderr, "line %d: %.17g != %.17g\n", __LINE__, (double)(a), (double)(b)); \
    failures++; } } while (0)

template <typename T> struct Vec3 {
  T x, y, z;
  T dot(const Vec3 &o) const { return x * o.x + y * o.y + z * o.z; }
  Vec3 scaled(T s) const { return {x * s, y * s, z * s}; }
};

class Spring {
 public:
  explicit Spring(double k) : k_(k) {}
  double energy(const Vec3<double> &a, const Vec3<double> &b) const {
    Vec3<double> d{a.x - b.x, a.y - b.y, a.z - b.z};
    return 0.5 * k_ * d.dot(d);
  }
 private:
  double k_;
};

double total(const Spring &s, Vec3<double> *p, double scale) {
  Vec3<double> q = p[1].scaled(scale);
  return s.energy(p[0], q);
}

int main() {
  Spring s(2.0);
  Vec3<double> p[2] = {{1, 2, 3}, {0.5, -1, 2}}, dp[2] = {};
  double scale = 1.5;
  double dscale = __enzyme_autodiff<double>((void *)total, enzyme_const, &s, enzyme_dup, p, dp,
                                            enzyme_out, scale);
  Vec3<double> d{p[0].x - scale * p[1].x, p[0].y - scale * p[1].y, p[0].z - scale * p[1].z};
  APPROX_EQ(dp[0].x, 2.0 * d.x);
  APPROX_EQ(dp[0].z, 2.0 * d.z);
  APPROX_EQ(dp[1].y, -2.0 * scale * d.y);
  APPROX_EQ(dscale, -2.0 * d.dot(p[1]));
  return failures;
}
