// Vector forward mode: enzyme_width 3 gives three directional derivatives in one call.
#include "test_utils.h"

typedef struct { double d[3]; } Tangents;
Tangents __enzyme_fwddiff(void *, ...);
void __enzyme_fwddiff_void(void *, ...) __asm__("__enzyme_fwddiff");

double f(double x, double y, double z) { return x * y * z + exp(x - z); }

void jac(const double *in, double *out) {
  out[0] = in[0] * in[1];
  out[1] = in[1] * in[1] + in[0];
}

int main(void) {
  double x = 0.3, y = 1.2, z = 0.7;
  Tangents t = __enzyme_fwddiff((void *)f, enzyme_width, 3, x, 1.0, 0.0, 0.0, y, 0.0, 1.0,
                                0.0, z, 0.0, 0.0, 1.0);
  APPROX_EQ(t.d[0], y * z + exp(x - z), 1e-12);
  APPROX_EQ(t.d[1], x * z, 1e-12);
  APPROX_EQ(t.d[2], x * y - exp(x - z), 1e-12);
  // A Jacobian by columns: two lanes of pointer shadows.
  double in[2] = {2, 3}, out[2], e0[2] = {1, 0}, e1[2] = {0, 1}, c0[2], c1[2];
  __enzyme_fwddiff_void((void *)jac, enzyme_width, 2, in, e0, e1, out, c0, c1);
  APPROX_EQ(c0[0], in[1], 1e-12);
  APPROX_EQ(c0[1], 1.0, 1e-12);
  APPROX_EQ(c1[0], in[0], 1e-12);
  APPROX_EQ(c1[1], 2 * in[1], 1e-12);
  return failures;
}
