// Globals: a constant table read by index and a mutable (constant-activity) parameter.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

static const double coeffs[4] = {1.0, -0.5, 0.25, 2.0};
double gain = 3.0;

double poly(double x) {
  double s = 0, p = 1;
  for (int i = 0; i < 4; i++, p *= x) s += coeffs[i] * p;
  return gain * s;
}

int main(void) {
  double x = 0.6;
  double want = gain * (coeffs[1] + 2 * coeffs[2] * x + 3 * coeffs[3] * x * x);
  APPROX_EQ(__enzyme_autodiff((void *)poly, x), want, 1e-12);
  gain = 5.0;  // the derivative reads the program's global, not a copy
  APPROX_EQ(__enzyme_autodiff((void *)poly, x), want * 5.0 / 3.0, 1e-12);
  return failures;
}
