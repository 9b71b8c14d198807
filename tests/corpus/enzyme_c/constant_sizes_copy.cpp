// A struct that holds an active pointer gets its sizes copied from a constant global (a
// memcpy at any -O: Eigen's tensor expressions take their dimensions that way): the copy
// goes into the struct's shadow too, from the primal constants (the global has no shadow).
// The callee is recursive so that it stays a call, which reads the sizes from the struct.
// (C++, so that pyzyme cc links it: the copy from a null shadow made the linked program
// crash at -O1..-O3 and compute zeros at -O0.)
#include <string.h>

#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

struct view {
  const double *data;
  long dims[6];
};

static const long shape[6] = {3, 2, 1, 1, 1, 1};

double norm2(const struct view *v, int k, long n) {
  if (k < 6) {
    double s = norm2(v, k + 1, n * v->dims[k]);
    return s * 1.0 + 0.0 * (double)k;  // not a tail call: LLVM keeps the recursion
  }
  double s = 0;
  for (long i = 0; i < n; i++) s += v->data[i] * v->data[i];
  return s;
}

double f(const double *x) {
  struct view v;
  v.data = x;
  memcpy(v.dims, shape, sizeof v.dims);
  return norm2(&v, 0, 1);
}

int main(void) {
  double x[6] = {1, 2, 3, 4, 5, 6}, dx[6] = {0};
  __enzyme_autodiff((void *)f, x, dx);
  for (int i = 0; i < 6; i++) APPROX_EQ(dx[i], 2 * x[i], 1e-12);
  return failures;
}
