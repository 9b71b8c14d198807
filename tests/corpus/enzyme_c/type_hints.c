// Enzyme's type hints inside differentiated code, on memory that carries derivatives: a
// buffer of doubles copied byte by byte (whose type only the hint tells), and a one-argument
// hint as some programs declare it. The hints change no value: the gradient is 2 x sum(x).
#include <string.h>
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
void __enzyme_double(void *, size_t);
void __enzyme_float(void *);

double sum_of_squares(const double *x, int n) {
  double buf[8];
  float scale = 1.0f;
  __enzyme_float(&scale);
  __enzyme_double(buf, sizeof(buf));
  memcpy(buf, x, sizeof(double) * n);
  double s = 0;
  for (int i = 0; i < n; i++) s += buf[i] * buf[i] * scale;
  return s;
}

int main(void) {
  double x[4] = {0.5, -1.0, 2.0, 0.25}, dx[4] = {0};
  __enzyme_autodiff((void *)sum_of_squares, enzyme_dup, x, dx, enzyme_const, 4);
  for (int i = 0; i < 4; i++) APPROX_EQ(dx[i], 2 * x[i], 1e-12);
  return failures;
}
