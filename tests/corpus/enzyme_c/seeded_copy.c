// A function that stays a call (it is recursive) copies a block with memcpy; nothing in it
// says what the bytes are. Its caller filled the block with doubles: the callee's type
// analysis starts from what its calls know of their arguments (Enzyme's interprocedural
// type analysis), so the copy moves adjoints back as doubles (it was refused as unknown).
#include "test_utils.h"
#include <string.h>

void __enzyme_autodiff(void *, ...);

static void *moved(void *block, int n, int levels) {
  if (levels > 1) block = moved(block, n, levels - 1);
  void *fresh = malloc(n * sizeof(double));
  memcpy(fresh, block, n * sizeof(double));
  free(block);
  return fresh;
}

// sum x[i]^3, the squares moved n / 2 times before they are read.
double cubes(const double *x, int n) {
  double *sq = (double *)malloc(n * sizeof(double));
  for (int i = 0; i < n; i++) sq[i] = x[i] * x[i];
  sq = (double *)moved(sq, n, n / 2);
  double s = 0;
  for (int i = 0; i < n; i++) s += sq[i] * x[i];
  free(sq);
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
