// A union of a double and its bits: the sign flipped through the integer view.
#include "test_utils.h"
#include <stdint.h>

double __enzyme_autodiff(void *, ...);

typedef union { double d; uint64_t bits; } View;

double negabs(double x) {
  View v = {.d = x * x};
  v.bits |= 0x8000000000000000ull;  // -|x^2|
  return v.d * 3.0;
}

int main(void) {
  double x = 1.25;
  APPROX_EQ(__enzyme_autodiff((void *)negabs, x), -6.0 * x, 1e-12);
  return failures;
}
