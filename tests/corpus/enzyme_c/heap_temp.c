// A heap temporary: squares go to a malloc'd buffer that is summed and freed.
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);

double sumsq(const double *x, int n) {
  double *t = (double *)malloc(n * sizeof(double));
  for (int i = 0; i < n; i++) t[i] = x[i] * x[i];
  double s = 0;
  for (int i = 0; i < n; i++) s += t[i] * x[i];
  free(t);
  return s;
}

int main(void) {
  double x[4] = {1, -2, 0.5, 3}, dx[4] = {0};
  __enzyme_autodiff((void *)sumsq, x, dx, 4);
  for (int i = 0; i < 4; i++) APPROX_EQ(dx[i], 3 * x[i] * x[i], 1e-12);
  return failures;
}
