// Newton's iteration for sqrt(a) with a data-dependent stopping test: d/da = 1 / (2 sqrt a).
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double newton(double a) {
  double x = a > 1 ? a : 1.0;
  int it = 0;
  while (fabs(x * x - a) > 1e-15 * a && it++ < 100) x = 0.5 * (x + a / x);
  return x;
}

int main(void) {
  double a = 7.3;
  APPROX_EQ(__enzyme_autodiff((void *)newton, a), 0.5 / sqrt(a), 1e-9);
  APPROX_EQ(__enzyme_fwddiff((void *)newton, a, 1.0), 0.5 / sqrt(a), 1e-9);
  return failures;
}
