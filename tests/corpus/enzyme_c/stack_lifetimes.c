// Stack arrays whose lifetime clang ends (llvm.lifetime.end at -O1 and above) before the
// reverse sweep reads them again: one filled by a copy of the input and read in a loop after
// it, one declared inside a loop (a new lifetime each iteration). The reverse sweep must read
// the values the forward sweep left, not a dead slot (which LLVM may fold to poison: NaN).
#include <string.h>
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

// sum_i x_i^2
__attribute__((noinline)) double copied(const double *x, int n) {
  double buf[8];
  memcpy(buf, x, sizeof(double) * n);
  double s = 0;
  for (int i = 0; i < n; i++) s += buf[i] * buf[i];
  return s;
}

// sum_i x_i^2 (1 * 4 + 2 * 3)
__attribute__((noinline)) double per_iteration(const double *x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) {
    double tmp[4];
    for (int k = 0; k < 4; k++) tmp[k] = x[i] * (k + 1);
    s += tmp[0] * tmp[3] + tmp[1] * tmp[2];
  }
  return s;
}

int main(void) {
  double x[5] = {0.5, -1.0, 2.0, 0.25, 3.0}, dx[5] = {0}, dy[5] = {0};
  __enzyme_autodiff((void *)copied, enzyme_dup, x, dx, enzyme_const, 5);
  __enzyme_autodiff((void *)per_iteration, enzyme_dup, x, dy, enzyme_const, 5);
  for (int i = 0; i < 5; i++) {
    APPROX_EQ(dx[i], 2 * x[i], 1e-12);
    APPROX_EQ(dy[i], 20 * x[i], 1e-12);
  }
  return failures;
}
