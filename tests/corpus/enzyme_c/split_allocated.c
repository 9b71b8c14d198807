// Split mode with a tape the caller allocates (enzyme_allocated, enzyme_tape), its size from
// __enzyme_augmentsize; an active scalar result whose seed the reverse pass takes.
#include "test_utils.h"

int __enzyme_augmentsize(void *, ...);
double __enzyme_augmentfwd(void *, ...);
double __enzyme_reverse(void *, ...);

double norm2(const double *x, double scale, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += x[i] * x[i];
  return scale * sqrt(s);
}

int main(void) {
  double x[3] = {1, 2, 2}, dx[3] = {0};
  int size = __enzyme_augmentsize((void *)norm2, enzyme_dup, enzyme_out, enzyme_const);
  char *tape = malloc(size);
  double y = __enzyme_augmentfwd((void *)norm2, enzyme_allocated, size, enzyme_tape, tape,
                                 enzyme_dup, x, dx, enzyme_out, 2.0, enzyme_const, 3);
  APPROX_EQ(y, 6.0, 1e-12);
  double dscale = __enzyme_reverse((void *)norm2, enzyme_allocated, size, enzyme_tape, tape,
                                   enzyme_dup, x, dx, enzyme_out, 2.0, enzyme_const, 3, 0.5);
  for (int i = 0; i < 3; i++) APPROX_EQ(dx[i], 0.5 * 2.0 * x[i] / 3.0, 1e-12);
  APPROX_EQ(dscale, 0.5 * 3.0, 1e-12);
  free(tape);
  return failures;
}
