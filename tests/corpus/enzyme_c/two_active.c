// Two active scalars: the derivatives come back as a struct, in argument order.
#include "test_utils.h"

typedef struct { double dx, dy; } Gradients;
Gradients __enzyme_autodiff(void *, ...);

double f(double x, double y) { return x * x * y + sin(y) / x; }

int main(void) {
  double x = 1.3, y = 0.7;
  Gradients g = __enzyme_autodiff((void *)f, x, y);
  APPROX_EQ(g.dx, 2 * x * y - sin(y) / (x * x), 1e-12);
  APPROX_EQ(g.dy, x * x + cos(y) / x, 1e-12);
  double only = ((double (*)(void *, ...))__enzyme_autodiff)((void *)f, enzyme_const, x, y);
  (void)only;
  return failures;
}
