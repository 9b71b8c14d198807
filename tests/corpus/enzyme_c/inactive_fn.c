// __enzyme_inactivefn and __enzyme_function_like: a logging helper without a derivative,
// and a hand-written logarithm differentiated as the C library's log.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

static int calls = 0;
__attribute__((noinline)) double record(double v) {
  calls++;  // a side effect: it must still happen in the derivative's forward pass
  return sqrt(v) * sqrt(v);  // depends on v, but the registration says: no derivative
}
void *__enzyme_inactivefn[] = {(void *)record};

__attribute__((noinline)) double mylog(double x) {
  double y = 0;  // a series the derivative should not follow
  for (double t = (x - 1) / (x + 1), p = t, k = 1; k < 60; k += 2, p *= t * t) y += 2 * p / k;
  return y;
}
void *__enzyme_function_like[2] = {(void *)mylog, "log"};

double f(double x) { return record(x) * x + mylog(x); }

int main(void) {
  double x = 1.7;
  // record's result is inactive: only the explicit x contributes, plus d log = 1/x.
  APPROX_EQ(__enzyme_autodiff((void *)f, x), x + 1 / x, 1e-12);
  if (calls != 1) failures++;
  return failures;
}
