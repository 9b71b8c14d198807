// Functions with internal or discardable linkage passed to __enzyme_*: a static function, a
// function in an anonymous namespace and a template instance, which nothing else calls (the
// AD copy must keep each of them until its derivative is built).
#include <cmath>
#include <cstdio>

extern int enzyme_dup, enzyme_const, enzyme_out;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
static int failures = 0;
#define APPROX_EQ(a, b) \
  do { if (!(std::fabs((a) - (b)) <= 1e-12 * (1 + std::fabs(b)))) { \
    std::fprintf(stderr, "line %d: %.17g != %.17g\n", __LINE__, (double)(a), (double)(b)); \
    failures++; } } while (0)

static double cube(double x) { return x * x * x; }

namespace {
double sin_times(double x, double y) { return std::sin(x) * y; }
}  // namespace

template <int N> double power(const double *x) {
  double r = 1;
  for (int i = 0; i < N; i++) r *= *x;
  return r;
}

int main() {
  double x = 1.3, dx = 0;
  APPROX_EQ(__enzyme_autodiff((void *)cube, x), 3 * x * x);
  APPROX_EQ(__enzyme_fwddiff((void *)cube, x, 1.0), 3 * x * x);
  APPROX_EQ(__enzyme_autodiff((void *)sin_times, enzyme_const, x, 2.5), std::sin(x));
  __enzyme_autodiff((void *)power<4>, &x, &dx);
  APPROX_EQ(dx, 4 * x * x * x);
  return failures;
}
