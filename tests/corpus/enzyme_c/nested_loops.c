// Nested loops with a triangular inner bound: f(x) = sum_{i} sum_{j<=i} x_i x_j.
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);

double tri(const double *x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j <= i; j++) s += x[i] * x[j];
  return s;
}

int main(void) {
  enum { N = 6 };
  double x[N], dx[N] = {0};
  for (int i = 0; i < N; i++) x[i] = 0.3 * i - 0.5;
  __enzyme_autodiff((void *)tri, enzyme_dup, x, dx, enzyme_const, N);
  double total = 0;
  for (int i = 0; i < N; i++) total += x[i];
  // d/dx_k: sum over pairs (i, j<=i) containing k: x_k appears in (k, j<k) and (i>k, k) and
  // twice in (k, k): the sum of all x plus x_k.
  for (int k = 0; k < N; k++) APPROX_EQ(dx[k], total + x[k], 1e-12);
  return failures;
}
