// A loop over an array: d/dx_i sum(x_i^2 * w_i) = 2 x_i w_i, weights const, n const.
#include "test_utils.h"

double weighted(const double *x, const double *w, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += x[i] * x[i] * w[i];
  return s;
}
void __enzyme_autodiff(void *, ...);

int main(void) {
  double x[5] = {1, 2, 3, 4, 5}, dx[5] = {0}, w[5] = {0.5, 1, 1.5, 2, 2.5};
  __enzyme_autodiff((void *)weighted, x, dx, enzyme_const, w, 5);
  for (int i = 0; i < 5; i++) APPROX_EQ(dx[i], 2 * x[i] * w[i], 1e-12);
  return failures;
}
