// Split mode on scalars: the reverse pass returns the adjoints of the active arguments as a
// struct, taking the seed of the result and then the tape.
#include "test_utils.h"

typedef struct { void *tape; double value; } Aug;
typedef struct { double dx, dy; } Grad;
Aug __enzyme_augmentfwd(void *, ...);
Grad __enzyme_reverse(void *, ...);

double f(double x, double y) { return x * exp(y) + y * y; }

int main(void) {
  double x = 0.4, y = 1.1;
  Aug a = __enzyme_augmentfwd((void *)f, x, y);
  APPROX_EQ(a.value, f(x, y), 1e-12);
  Grad g = __enzyme_reverse((void *)f, x, y, 2.0, a.tape);
  APPROX_EQ(g.dx, 2.0 * exp(y), 1e-12);
  APPROX_EQ(g.dy, 2.0 * (x * exp(y) + 2 * y), 1e-12);
  return failures;
}
