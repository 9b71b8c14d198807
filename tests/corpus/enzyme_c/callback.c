// A qsort-style callback: the integrand is a function pointer whose target is known.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

typedef double (*fn_t)(double, double);
static double integrand(double t, double a) { return sin(a * t); }

static double integrate(fn_t f, double a, int n) {  // midpoint rule on [0, 1]
  double s = 0, h = 1.0 / n;
  for (int i = 0; i < n; i++) s += f((i + 0.5) * h, a) * h;
  return s;
}

double area(double a) { return integrate(integrand, a, 200); }

int main(void) {
  double a = 1.5, h = 1.0 / 200, want = 0;
  for (int i = 0; i < 200; i++) {
    double t = (i + 0.5) * h;
    want += t * cos(a * t) * h;
  }
  APPROX_EQ(__enzyme_autodiff((void *)area, a), want, 1e-12);
  return failures;
}
