// RK4 for y' = -k y: d y(T) / d k in reverse and forward mode against -T y0 exp(-k T).
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

static double rhs(double y, double k) { return -k * y; }

double integrate(double y0, double k, int steps) {
  double h = 1.0 / steps, y = y0;
  for (int i = 0; i < steps; i++) {
    double k1 = rhs(y, k), k2 = rhs(y + 0.5 * h * k1, k), k3 = rhs(y + 0.5 * h * k2, k);
    double k4 = rhs(y + h * k3, k);
    y += h / 6 * (k1 + 2 * k2 + 2 * k3 + k4);
  }
  return y;
}

int main(void) {
  double y0 = 2.0, k = 0.7;
  double want = -y0 * exp(-k);  // T = 1
  APPROX_EQ(__enzyme_autodiff((void *)integrate, enzyme_const, y0, k, 100), want, 1e-8);
  APPROX_EQ(__enzyme_fwddiff((void *)integrate, enzyme_const, y0, k, 1.0, 100), want, 1e-8);
  return failures;
}
