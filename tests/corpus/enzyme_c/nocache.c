// enzyme_nocache before an argument promises Enzyme that its memory is not overwritten between
// the forward and the reverse pass: a hint, with or without the activity marker after it.
#include "test_utils.h"

extern int enzyme_nocache;
void *__enzyme_augmentfwd(void *, ...);
void __enzyme_reverse(void *, ...);
void __enzyme_autodiff(void *, ...);

// y[i] = x[i]^2 c[i]
void f(double *y, const double *x, const double *c, int n) {
  for (int i = 0; i < n; i++) y[i] = x[i] * x[i] * c[i];
}

int main(void) {
  double x[4] = {0.5, -1.0, 2.0, 3.0}, c[4] = {1.0, 2.0, -0.5, 0.25}, y[4];
  double dx[4] = {0}, dy[4] = {1, 1, 1, 1};
  void *tape = __enzyme_augmentfwd((void *)f, enzyme_nocache, y, dy, enzyme_nocache, enzyme_dup,
                                   x, dx, enzyme_const, c, 4);
  __enzyme_reverse((void *)f, enzyme_nocache, y, dy, enzyme_nocache, enzyme_dup, x, dx,
                   enzyme_const, c, 4, tape);
  for (int i = 0; i < 4; i++) {
    APPROX_EQ(y[i], x[i] * x[i] * c[i], 1e-12);
    APPROX_EQ(dx[i], 2 * x[i] * c[i], 1e-12);
    dx[i] = 0;
    dy[i] = 2;
  }
  __enzyme_autodiff((void *)f, enzyme_nocache, enzyme_dup, y, dy, x, dx, enzyme_const, c, 4);
  for (int i = 0; i < 4; i++) APPROX_EQ(dx[i], 4 * x[i] * c[i], 1e-12);
  return failures;
}
