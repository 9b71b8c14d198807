// Single precision: a prototype keeps the floats float (a variadic call would promote them).
#include "test_utils.h"

float __enzyme_autodiff(void *, float);
float __enzyme_fwddiff(void *, float, float);

float f(float x) { return x * sinf(x) + expf(-x * x); }

int main(void) {
  float x = 0.8f;
  float want = sinf(x) + x * cosf(x) - 2 * x * expf(-x * x);
  APPROX_EQ(__enzyme_autodiff((void *)f, x), want, 1e-5);
  APPROX_EQ(__enzyme_fwddiff((void *)f, x, 1.0f), want, 1e-5);
  return failures;
}
