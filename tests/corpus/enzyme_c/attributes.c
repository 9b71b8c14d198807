// Enzyme's attributes: an inactive function and one differentiated as the C library's log,
// neither marked noinline (clang inlines both at -O1 and above unless they are kept as calls),
// and an inactive global into which differentiated code records an active value.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

__attribute__((enzyme_inactive)) double scale(double v) { return 2 * v; }

__attribute__((enzyme_function_like("log"))) double mylog(double x) {
  double y = 0;  // a series whose own derivative is not 1/x
  for (double t = (x - 1) / (x + 1), p = t, k = 1; k < 40; k += 2, p *= t * t) y += 2 * p / k;
  return y;
}

__attribute__((enzyme_inactive)) double last_square;

double f(double x) {
  last_square = x * x;  // recorded, not differentiated
  return scale(x) * x + mylog(x);
}

int main(void) {
  double x = 1.7;
  // scale(x) is a constant: d/dx [scale(x) x] = scale(x) = 2x; d log = 1/x.
  APPROX_EQ(__enzyme_autodiff((void *)f, x), 2 * x + 1 / x, 1e-12);
  APPROX_EQ(__enzyme_fwddiff((void *)f, x, 1.0), 2 * x + 1 / x, 1e-12);
  APPROX_EQ(last_square, x * x, 1e-15);
  return failures;
}
