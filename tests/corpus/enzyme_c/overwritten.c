// Values overwritten after they are read: an in-place recurrence x[i] = x[i] * x[i-1].
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);

void scan(double *x, int n) {
  for (int i = 1; i < n; i++) x[i] = x[i] * x[i - 1] + sin(x[i]);
  for (int i = 0; i < n; i++) x[i] = x[i] * x[i];
}

int main(void) {
  enum { N = 5 };
  double x[N] = {0.9, 1.1, 0.7, 1.3, 0.8}, dx[N], ref[N];
  // reference gradient of sum(out) by central differences on the primal
  for (int k = 0; k < N; k++) {
    double h = 1e-6, a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = x[i];
    a[k] += h;
    b[k] -= h;
    scan(a, N);
    scan(b, N);
    double sa = 0, sb = 0;
    for (int i = 0; i < N; i++) sa += a[i], sb += b[i];
    ref[k] = (sa - sb) / (2 * h);
  }
  for (int i = 0; i < N; i++) dx[i] = 1.0;  // seed: d sum / d out_i = 1
  __enzyme_autodiff((void *)scan, x, dx, N);
  for (int k = 0; k < N; k++) APPROX_EQ(dx[k], ref[k], 1e-7);
  return failures;
}
