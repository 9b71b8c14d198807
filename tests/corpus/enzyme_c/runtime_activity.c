// enzyme_runtime_activity: a pointer chosen at run time between memory with a shadow (x) and
// memory without one (c, enzyme_const). Without the marker pyzyme refuses the call (the
// activity of p is unknown until it runs); with it, p is its own shadow when it is c.
#include "test_utils.h"

extern int enzyme_runtime_activity;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double pick(double *x, double *c, int use_x) {
  double *p = use_x ? x : c;
  double s = 0;
  for (int i = 0; i < 3; i++) s += p[i] * p[i] * x[i];
  return s;
}

int main(void) {
  double x[3] = {1, 2, 3}, c[3] = {-1, 0.5, 4}, dx[3] = {0, 0, 0};
  __enzyme_autodiff((void *)pick, enzyme_runtime_activity, x, dx, enzyme_const, c, 1);
  for (int i = 0; i < 3; i++) APPROX_EQ(dx[i], 3 * x[i] * x[i], 1e-12);
  double dx2[3] = {0, 0, 0};
  __enzyme_autodiff((void *)pick, enzyme_runtime_activity, x, dx2, enzyme_const, c, 0);
  for (int i = 0; i < 3; i++) APPROX_EQ(dx2[i], c[i] * c[i], 1e-12);
  // Forward mode: the directional derivative along (1, 1, 1).
  double ones[3] = {1, 1, 1};
  APPROX_EQ(__enzyme_fwddiff((void *)pick, enzyme_runtime_activity, x, ones, enzyme_const, c,
                             0), 1 + 0.25 + 16, 1e-12);
  APPROX_EQ(__enzyme_fwddiff((void *)pick, enzyme_runtime_activity, x, ones, enzyme_const, c,
                             1), 3 * (1 + 4 + 9), 1e-12);
  return failures;
}
