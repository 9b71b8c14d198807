// The C library's math functions, each against its analytic derivative.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

double f_exp_log(double x) { return exp(x) * log(x); }
double f_pow(double x) { return pow(x, 2.5) + pow(2.0, x); }
double f_tanh(double x) { return tanh(x) + atan(x); }
double f_sqrt_hypot(double x) { return sqrt(x) + hypot(x, 3.0); }
double f_atan2(double x) { return atan2(x, 2.0); }
double f_minmax(double x) { return fmax(x, 1.0) + fmin(x * x, 4.0) + fabs(x - 3.0); }

int main(void) {
  double x = 1.3;
  APPROX_EQ(__enzyme_autodiff((void *)f_exp_log, x), exp(x) * log(x) + exp(x) / x, 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)f_pow, x), 2.5 * pow(x, 1.5) + log(2.0) * pow(2, x),
            1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)f_tanh, x), 1 - tanh(x) * tanh(x) + 1 / (1 + x * x),
            1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)f_sqrt_hypot, x), 0.5 / sqrt(x) + x / hypot(x, 3.0),
            1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)f_atan2, x), 2.0 / (x * x + 4.0), 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)f_minmax, x), 1.0 + 2 * x - 1.0, 1e-12);
  return failures;
}
