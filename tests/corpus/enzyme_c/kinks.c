// Derivatives at kinks are one-sided, never NaN or a zero average: |x| at +0 and -0 (the
// sign of the zero says from which side), |-x^2|'' at 0 through nested derivatives, a
// floor fmax(|v|, eps) at the origin, and |a - b| where a == b.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double absf(double x) { return fabs(x); }
double negsq_abs(double x) { return fabs(-x * x); }
double d_negsq_abs(double x) { return __enzyme_fwddiff((void *)negsq_abs, x, 1.0); }
double inv_floor(double x) { return 1.0 / fmax(sqrt(x * x), 1e-12); }
double absdiff(double a, double b) { return fabs(a - b) * a; }

int main(void) {
  APPROX_EQ(__enzyme_fwddiff((void *)absf, 0.0, 1.0), 1.0, 0.0);
  APPROX_EQ(__enzyme_fwddiff((void *)absf, -0.0, 1.0), -1.0, 0.0);
  APPROX_EQ(__enzyme_autodiff((void *)absf, 0.0), 1.0, 0.0);
  APPROX_EQ(__enzyme_autodiff((void *)absf, -0.0), -1.0, 0.0);
  APPROX_EQ(__enzyme_autodiff((void *)absf, -2.0), -1.0, 0.0);
  // |-x^2| = x^2: first derivative 0 at 0, second 2 (|'(-0) = -1 times -2x').
  APPROX_EQ(d_negsq_abs(0.0), 0.0, 0.0);
  APPROX_EQ(__enzyme_fwddiff((void *)d_negsq_abs, 0.0, 1.0), 2.0, 1e-14);
  APPROX_EQ(__enzyme_autodiff((void *)d_negsq_abs, 0.0), 2.0, 1e-14);
  // At the origin the floor is selected: a constant, derivative 0 (not NaN from sqrt'(0)).
  APPROX_EQ(__enzyme_fwddiff((void *)inv_floor, 0.0, 1.0), 0.0, 0.0);
  APPROX_EQ(__enzyme_autodiff((void *)inv_floor, 0.0), 0.0, 0.0);
  // d/da (|a - b| a) at a = b = 2: the one-sided values are 2 and -2 (plus |a - b| = 0).
  double d = __enzyme_autodiff((void *)absdiff, enzyme_out, 2.0, enzyme_const, 2.0);
  if (!(d == 2.0 || d == -2.0)) {
    fprintf(stderr, "d/da |a - b| a at a = b: %g, not a one-sided derivative\n", d);
    failures++;
  }
  return failures;
}
