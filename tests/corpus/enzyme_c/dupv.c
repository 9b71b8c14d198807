// enzyme_dupv: the lanes of a shadow are STRIDE bytes apart in one buffer.
#include "test_utils.h"

void __enzyme_fwddiff(void *, ...);
int enzyme_dupv;

void poly(const double *x, double *y) {
  y[0] = x[0] * x[0] * x[1];
  y[1] = x[1] * x[1] * x[1];
}

int main(void) {
  double x[2] = {1.5, -0.5}, y[2];
  double dx[2][2] = {{1, 0}, {0, 1}}, dy[2][2];
  __enzyme_fwddiff((void *)poly, enzyme_width, 2, enzyme_dupv, sizeof(dx[0]), x, dx,
                   enzyme_dupv, sizeof(dy[0]), y, dy);
  APPROX_EQ(dy[0][0], 2 * x[0] * x[1], 1e-12);
  APPROX_EQ(dy[0][1], 0.0, 1e-12);
  APPROX_EQ(dy[1][0], x[0] * x[0], 1e-12);
  APPROX_EQ(dy[1][1], 3 * x[1] * x[1], 1e-12);
  return failures;
}
