// Arguments without markers: a double pointer followed by its shadow, then an int pointer
// followed by an int, which cannot be its shadow, so the int pointer is a constant (as Enzyme
// reads such calls). f(x, counts, m) = sum_i counts[i] x_i^2 over the first m entries.
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double f(const double *x, const int *counts, int m) {
  double s = 0;
  for (int i = 0; i < m; i++) s += counts[i] * x[i] * x[i];
  return s;
}

int main(void) {
  double x[3] = {0.5, -2.0, 1.5}, dx[3] = {0}, v[3] = {1, 1, 1};
  int counts[3] = {1, 2, 3};
  __enzyme_autodiff((void *)f, x, dx, counts, 3);
  double t = __enzyme_fwddiff((void *)f, x, v, counts, 3);
  double want_t = 0;
  for (int i = 0; i < 3; i++) {
    APPROX_EQ(dx[i], 2 * counts[i] * x[i], 1e-12);
    want_t += 2 * counts[i] * x[i];
  }
  APPROX_EQ(t, want_t, 1e-12);
  return failures;
}
