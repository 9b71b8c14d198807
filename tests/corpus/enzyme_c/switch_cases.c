// A switch on an integer mode chooses the formula.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

double pick(double x, int mode) {
  switch (mode) {
    case 0: return x * x;
    case 1: return sin(x);
    case 2: return exp(2 * x);
    default: return 1.0 / x;
  }
}

int main(void) {
  double x = 0.9;
  APPROX_EQ(__enzyme_autodiff((void *)pick, x, 0), 2 * x, 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)pick, x, 1), cos(x), 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)pick, x, 2), 2 * exp(2 * x), 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)pick, x, 7), -1 / (x * x), 1e-12);
  return failures;
}
