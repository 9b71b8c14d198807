// A buffer grown with realloc while it is filled: products of prefixes.
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);

double grow(const double *x, int n) {
  int cap = 1;
  double *buf = (double *)malloc(cap * sizeof(double));
  double p = 1;
  for (int i = 0; i < n; i++) {
    if (i == cap) {
      cap *= 2;
      buf = (double *)realloc(buf, cap * sizeof(double));
    }
    p *= x[i];
    buf[i] = p;
  }
  double s = 0;
  for (int i = 0; i < n; i++) s += buf[i];
  free(buf);
  return s;
}

int main(void) {
  enum { N = 7 };
  double x[N], dx[N] = {0};
  for (int i = 0; i < N; i++) x[i] = 0.9 + 0.05 * i;
  __enzyme_autodiff((void *)grow, x, dx, N);
  for (int k = 0; k < N; k++) {
    double want = 0, p = 1;
    for (int i = 0; i < N; i++) {
      p *= x[i];
      if (i >= k) want += p / x[k];
    }
    APPROX_EQ(dx[k], want, 1e-12);
  }
  return failures;
}
