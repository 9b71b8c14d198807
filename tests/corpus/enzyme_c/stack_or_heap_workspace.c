// A workspace that is the caller's buffer when it has one, else a stack buffer (alloca) when
// small and the heap when large, as Eigen's matrix product takes its packing blocks
// (ei_declare_aligned_stack_constructed_variable): one pointer merges the three, and the
// stack buffer is bytes (alloca(n)) that hold doubles. Both modes give it a zeroed shadow of
// the same size (beside it, or in a split reverse pair on the heap: the callee's frame is gone
// when its reverse runs).
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

struct blocking {
  double *block;
  long size;
};

__attribute__((noinline)) double packed_dot(const double *x, long n, struct blocking *b) {
  double *w = b->block;
  int heap = 0;
  if (!w) {
    if (n * sizeof(double) <= 256) {
      w = __builtin_alloca(n * sizeof(double));
    } else {
      w = malloc(n * sizeof(double));
      heap = 1;
    }
  }
  for (long i = 0; i < n; i++) w[i] = x[i] * x[i];
  double s = 0;
  for (long i = 0; i < n; i++) s += w[i] * x[(i + 1) % n];
  if (heap) free(w);
  return s;
}

double f(const double *x, long n) {
  struct blocking b = {0, n};
  return packed_dot(x, n, &b);
}

static void check(long n) {
  double x[64], dx[64] = {0};
  for (long i = 0; i < n; i++) x[i] = 0.5 + 0.25 * i;
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, n);
  double v[64], want = 0;
  for (long k = 0; k < n; k++) {
    double prev = x[(k + n - 1) % n], grad = 2 * x[k] * x[(k + 1) % n] + prev * prev;
    APPROX_EQ(dx[k], grad, 1e-12);
    v[k] = 1.0 / (k + 1);
    want += grad * v[k];
  }
  APPROX_EQ(__enzyme_fwddiff((void *)f, enzyme_dup, x, v, enzyme_const, n), want, 1e-12);
  // The buffer's own function differentiated (one combined function: the shadow on its stack).
  double dx2[64] = {0};
  struct blocking b = {0, n}, db = {0, 0};
  __enzyme_autodiff((void *)packed_dot, enzyme_dup, x, dx2, enzyme_const, n, enzyme_dup, &b, &db);
  for (long k = 0; k < n; k++) APPROX_EQ(dx2[k], dx[k], 1e-12);
}

int main(void) {
  check(4);   // on the stack
  check(40);  // on the heap
  return failures;
}
