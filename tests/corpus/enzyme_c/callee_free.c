// A function that stays a call (it is recursive: one growth after another) moves a block its
// caller allocated and filled, as std::vector's growth does: a new block, the elements copied,
// the old block freed. The caller's reverse sweep, which runs after the callee's, reads the old
// block's shadow: it must still be allocated then (the callee's reverse sweep used to free it,
// and the first adjoints read back were the allocator's free-list links).
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);

struct vec {
  double *data;
  int len, cap;
};

static void grow(struct vec *v, int steps) {
  if (steps > 1) grow(v, steps - 1);
  double *buf = (double *)malloc(2 * v->cap * sizeof(double));
  for (int i = 0; i < v->len; i++) buf[i] = v->data[i];
  free(v->data);
  v->data = buf;
  v->cap *= 2;
}

// sum x[i]^3, the squares kept in a block that is grown n / 3 times before it is read.
double cubes(const double *x, int n) {
  struct vec v = {(double *)malloc(n * sizeof(double)), n, n};
  for (int i = 0; i < n; i++) v.data[i] = x[i] * x[i];
  grow(&v, n / 3);
  double s = 0;
  for (int i = 0; i < n; i++) s += v.data[i] * x[i];
  free(v.data);
  return s;
}

int main(void) {
  enum { N = 7 };
  double x[N], dx[N] = {0};
  for (int i = 0; i < N; i++) x[i] = 0.5 + 0.25 * i;
  __enzyme_autodiff((void *)cubes, x, dx, N);
  for (int i = 0; i < N; i++) APPROX_EQ(dx[i], 3 * x[i] * x[i], 1e-12);
  return failures;
}
