// Split mode with an anonymous tape: the augmented forward pass returns it, the reverse pass
// takes it last; between the two the caller overwrites the input (the tape must hold it).
#include "test_utils.h"

void *__enzyme_augmentfwd(void *, ...);
void __enzyme_reverse(void *, ...);

void f(double *x, double *y, int n) {
  for (int i = 0; i < n; i++) y[i] = sin(x[i]) * x[i];
  x[0] = 0;  // the input is gone once f returns
}

int main(void) {
  double x[3] = {0.5, 1.0, 1.5}, dx[3] = {0}, y[3], dy[3] = {1, 2, 3};
  double x0[3] = {0.5, 1.0, 1.5};
  void *tape = __enzyme_augmentfwd((void *)f, x, dx, y, dy, 3);
  for (int i = 0; i < 3; i++) APPROX_EQ(y[i], sin(x0[i]) * x0[i], 1e-12);
  x[1] = 100;  // the caller changes what x holds between the passes
  __enzyme_reverse((void *)f, x, dx, y, dy, 3, tape);
  for (int i = 0; i < 3; i++)
    APPROX_EQ(dx[i], (i + 1) * (cos(x0[i]) * x0[i] + sin(x0[i])), 1e-12);
  return failures;
}
