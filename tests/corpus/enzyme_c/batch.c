// __enzyme_batch: the function evaluated for several lanes at once, scalars shared.
#include "test_utils.h"

typedef struct { double a, b, c; } Three;
Three __enzyme_batch(void *, ...);
int enzyme_scalar, enzyme_vector;

double f(double g, double x) { return g * x * x; }

int main(void) {
  Three r = __enzyme_batch((void *)f, enzyme_width, 3, enzyme_scalar, 2.0, enzyme_vector, 1.0,
                           2.0, 3.0);
  APPROX_EQ(r.a, 2.0, 1e-15);
  APPROX_EQ(r.b, 8.0, 1e-15);
  APPROX_EQ(r.c, 18.0, 1e-15);
  return failures;
}
