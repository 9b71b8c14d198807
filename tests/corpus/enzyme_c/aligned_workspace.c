// A workspace from an aligned allocator that rounds the address up through an integer and
// keeps the block's own address just below it, as Eigen's handmade_aligned_malloc does when
// the vector width exceeds malloc's alignment (64 bytes with AVX-512): the shadow is rounded
// the same way from the shadow block, so it is aligned as the primal and lies inside its block.
#include <stdint.h>

#include "test_utils.h"

void __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

static void *aligned_malloc(size_t size) {
  void *original = malloc(size + 64);
  if (!original) return 0;
  void *aligned = (void *)(((uintptr_t)original & ~(uintptr_t)63) + 64);
  ((void **)aligned)[-1] = original;
  return aligned;
}

static void aligned_free(void *p) {
  if (p) free(((void **)p)[-1]);
}

// Stays a call (a split pair in reverse mode): the allocation is made in the callee.
__attribute__((noinline)) double weighted(const double *x, long n) {
  double *w = aligned_malloc(n * sizeof(double));
  if (((uintptr_t)w & 63) != 0) abort();
  for (long i = 0; i < n; i++) w[i] = x[i] * x[i];
  double s = 0;
  for (long i = 0; i < n; i++) s += w[i] * x[n - 1 - i];
  aligned_free(w);
  return s;
}

double f(const double *x, long n) { return weighted(x, n) + 0.5 * x[0]; }

int main(void) {
  enum { N = 9 };
  double x[N], dx[N] = {0}, dx2[N] = {0}, v[N], want = 0;
  for (int i = 0; i < N; i++) x[i] = 0.25 + 0.5 * i, v[i] = 1.0 / (i + 1);
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, (long)N);
  __enzyme_autodiff((void *)weighted, enzyme_dup, x, dx2, enzyme_const, (long)N);
  for (int k = 0; k < N; k++) {
    double grad = 2 * x[k] * x[N - 1 - k] + x[N - 1 - k] * x[N - 1 - k];
    APPROX_EQ(dx2[k], grad, 1e-12);
    APPROX_EQ(dx[k], grad + (k == 0 ? 0.5 : 0), 1e-12);
    want += grad * v[k];
  }
  APPROX_EQ(__enzyme_fwddiff((void *)weighted, enzyme_dup, x, v, enzyme_const, (long)N), want,
            1e-12);
  return failures;
}
