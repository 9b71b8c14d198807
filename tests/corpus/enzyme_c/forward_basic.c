// Forward mode: a float is followed by its tangent; pointers by their shadows.
#include "test_utils.h"

double __enzyme_fwddiff(void *, ...);

double cube(double x) { return x * x * x; }

void scale(const double *in, double *out, double a, int n) {
  for (int i = 0; i < n; i++) out[i] = a * in[i] * in[i];
}

int main(void) {
  double x = 1.7;
  APPROX_EQ(__enzyme_fwddiff((void *)cube, x, 1.0), 3 * x * x, 1e-12);
  double in[3] = {1, 2, 3}, din[3] = {1, 0, 2}, out[3], dout[3];
  double a = 0.5;
  __enzyme_fwddiff((void *)scale, in, din, out, dout, a, 1.0, 3);
  for (int i = 0; i < 3; i++) {
    APPROX_EQ(out[i], a * in[i] * in[i], 1e-12);
    APPROX_EQ(dout[i], in[i] * in[i] + 2 * a * in[i] * din[i], 1e-12);
  }
  return failures;
}
