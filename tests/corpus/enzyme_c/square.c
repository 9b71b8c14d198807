// The seed example: d/dx x^2 at 3.14.
#include "test_utils.h"

double square(double x) { return x * x; }
double __enzyme_autodiff(void *, double);

int main(void) {
  double x = 3.14;
  double grad_x = __enzyme_autodiff((void *)square, x);
  printf("square'(%f) = %f\n", x, grad_x);
  APPROX_EQ(grad_x, 6.28, 1e-12);
  return failures;
}
