// Recursion: x^n by repeated squaring, and a recursive sum over an array.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

__attribute__((noinline)) double power(double x, int n) {
  if (n == 0) return 1.0;
  double h = power(x, n / 2);
  return n % 2 ? h * h * x : h * h;
}

double rsum(const double *x, int n) { return n == 0 ? 0.0 : sin(x[0]) + rsum(x + 1, n - 1); }

int main(void) {
  double x = 1.1;
  APPROX_EQ(__enzyme_autodiff((void *)power, x, 13), 13 * pow(x, 12), 1e-12);
  double v[5] = {0.1, 0.2, 0.3, 0.4, 0.5}, dv[5] = {0};
  __enzyme_autodiff((void *)rsum, enzyme_dup, v, dv, enzyme_const, 5);
  for (int i = 0; i < 5; i++) APPROX_EQ(dv[i], cos(v[i]), 1e-12);
  return failures;
}
