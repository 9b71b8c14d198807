// Derivatives of derivatives, each __enzyme_* call inside a function another one
// differentiates: forward over forward, reverse over forward, forward over reverse, reverse
// over reverse, and a Hessian-vector product through a gradient that writes into an array.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double f(double x, double y) { return sin(x) * y * y; }
double dfdx(double x, double y) { return __enzyme_fwddiff((void *)f, x, 1.0, y, 0.0); }
double dfdy(double x, double y) { return __enzyme_autodiff((void *)f, enzyme_const, x, y); }

double energy(const double *u) { return u[0] * u[0] * u[1] + sin(u[1]); }
void gradient(const double *u, double *g) {
  g[0] = g[1] = 0;
  __enzyme_autodiff((void *)energy, enzyme_dup, u, g);
}

int main(void) {
  double x = 0.7, y = 1.9;
  APPROX_EQ(__enzyme_fwddiff((void *)dfdx, x, 1.0, y, 0.0), -sin(x) * y * y, 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)dfdx, enzyme_const, x, y), 2 * cos(x) * y, 1e-12);
  APPROX_EQ(__enzyme_fwddiff((void *)dfdy, x, 1.0, y, 0.0), 2 * cos(x) * y, 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)dfdy, enzyme_const, x, y), 2 * sin(x), 1e-12);

  double u[2] = {1.5, 0.4}, v[2] = {0.3, -2.0}, g[2], hv[2] = {0, 0};
  __enzyme_fwddiff((void *)gradient, enzyme_dup, u, v, enzyme_dup, g, hv);
  // H = [[2 u1, 2 u0], [2 u0, -sin u1]]
  APPROX_EQ(g[0], 2 * u[0] * u[1], 1e-12);
  APPROX_EQ(hv[0], 2 * u[1] * v[0] + 2 * u[0] * v[1], 1e-12);
  APPROX_EQ(hv[1], 2 * u[0] * v[0] - sin(u[1]) * v[1], 1e-12);
  return failures;
}
