// A loop that leaves early when a partial sum passes a bound (data-dependent trip count).
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);

double until(const double *x, int n, double bound) {
  double s = 0;
  for (int i = 0; i < n; i++) {
    if (s > bound) return s * s;
    s += x[i] * x[i];
  }
  return s;
}

int main(void) {
  double x[8] = {1, 1.5, 2, 0.5, 3, 1, 2, 1}, dx[8] = {0};
  // s after 3 terms: 1 + 2.25 + 4 = 7.25 > 6: returns s^2, d/dx_i = 2 s * 2 x_i for i < 3.
  __enzyme_autodiff((void *)until, x, dx, 8, enzyme_const, 6.0);
  double s = 7.25;
  for (int i = 0; i < 8; i++) APPROX_EQ(dx[i], i < 3 ? 4 * s * x[i] : 0.0, 1e-12);
  return failures;
}
