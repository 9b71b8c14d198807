// enzyme_primal_return: the primal result comes first; enzyme_const_return: no seed.
#include "test_utils.h"

typedef struct { double value, dx; } WithPrimal;
WithPrimal __enzyme_autodiff(void *, ...);
typedef struct { double value, tangent; } Dual;
Dual __enzyme_fwddiff(void *, ...);
void __enzyme_autodiff_void(void *, ...) __asm__("__enzyme_autodiff");
int enzyme_primal_return, enzyme_const_return;

double f(double x) { return log(x) * x; }
double g(double *x) { x[0] = x[0] * x[0]; return x[0]; }

int main(void) {
  double x = 2.5;
  WithPrimal r = __enzyme_autodiff((void *)f, enzyme_primal_return, x);
  APPROX_EQ(r.value, log(x) * x, 1e-12);
  APPROX_EQ(r.dx, log(x) + 1, 1e-12);
  Dual d = __enzyme_fwddiff((void *)f, enzyme_primal_return, x, 1.0);
  APPROX_EQ(d.value, log(x) * x, 1e-12);
  APPROX_EQ(d.tangent, log(x) + 1, 1e-12);
  // The result is not differentiated; the seed in the output memory is.
  double v = 3.0, dv = 1.0;
  __enzyme_autodiff_void((void *)g, enzyme_const_return, enzyme_dup, &v, &dv);
  APPROX_EQ(dv, 6.0, 1e-12);
  return failures;
}
