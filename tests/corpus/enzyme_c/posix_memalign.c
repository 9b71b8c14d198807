// posix_memalign'd workspace and a dupnoneed output (its primal values are not needed).
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);

void smooth(const double *x, double *out, int n) {
  double *w = NULL;
  if (posix_memalign((void **)&w, 64, n * sizeof(double))) return;
  for (int i = 0; i < n; i++) w[i] = x[i] * x[i];
  for (int i = 0; i < n; i++) out[i] = w[i] + (i ? w[i - 1] : 0);
  free(w);
}

int main(void) {
  double x[4] = {1, 2, 3, 4}, dx[4] = {0}, out[4], dout[4] = {1, 1, 1, 1};
  __enzyme_autodiff((void *)smooth, enzyme_dup, x, dx, enzyme_dupnoneed, out, dout,
                    enzyme_const, 4);
  for (int i = 0; i < 4; i++) APPROX_EQ(dx[i], 2 * x[i] * (i < 3 ? 2 : 1), 1e-12);
  return failures;
}
