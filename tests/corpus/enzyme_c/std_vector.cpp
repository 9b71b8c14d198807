// std::vector at any level: a vector argument, and a temporary vector inside the function.
#include <cmath>
#include <cstdio>
#include <vector>

extern "C" double __enzyme_autodiff(void *, ...);
extern "C" double __enzyme_fwddiff(void *, ...);
extern int enzyme_dup, enzyme_const;
static int failures = 0;
#define APPROX_EQ(a, b) \
  do { if (std::fabs((a) - (b)) > 1e-12 * (1 + std::fabs(b))) { \
    std::fprintf(stderr, "line %d: %.17g != %.17g\n", __LINE__, (double)(a), (double)(b)); \
    failures++; } } while (0)

double sumsq(const std::vector<double> &v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}

double smooth(const std::vector<double> &v) {
  std::vector<double> t(v.size());
  for (size_t i = 0; i < v.size(); i++) t[i] = std::sin(v[i]);
  double s = 0;
  for (size_t i = 0; i + 1 < t.size(); i++) s += t[i] * t[i + 1];
  return s;
}

int main() {
  std::vector<double> v{0.5, 1.0, 1.5, 2.0}, dv(4, 0.0);
  __enzyme_autodiff((void *)sumsq, enzyme_dup, &v, &dv);
  for (int i = 0; i < 4; i++) APPROX_EQ(dv[i], 2 * v[i]);
  std::vector<double> tv{1.0, 0.0, 0.0, 0.0};
  APPROX_EQ(__enzyme_fwddiff((void *)sumsq, &v, &tv), 2 * v[0]);
  std::vector<double> dw(4, 0.0);
  __enzyme_autodiff((void *)smooth, enzyme_dup, &v, &dw);
  for (int i = 0; i < 4; i++) {
    double want = 0;
    if (i > 0) want += std::cos(v[i]) * std::sin(v[i - 1]);
    if (i < 3) want += std::cos(v[i]) * std::sin(v[i + 1]);
    APPROX_EQ(dw[i], want);
  }
  return failures;
}
