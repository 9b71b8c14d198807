// A fixed-point loop marked from inside as Fortran's !DIR$ ENZYME FIXED_POINT lowers it: the
// marker's reduction, limit and state size passed by address (so without <enzyme/fixed_point.h>'s
// prototype). The gradient equals the plain loop's; a limit read at run time bounds the
// adjoint rounds a control function would not stop.
#include <stdint.h>
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);
void __enzyme_set_fixed_point();

static int calls;

static int control(double *cumul, double *reduction) {
  (void)cumul;
  (void)reduction;
  calls++;
  return 1;
}

#define SOLVE(name, mark)                                                    \
  double name(const double *p, int64_t most) {                               \
    double u[2] = {0, 0}, red = 1e-28, err;                                  \
    int64_t bytes = sizeof(u);                                               \
    (void)red, (void)bytes, (void)most;                                      \
    do {                                                                     \
      mark;                                                                  \
      double n0 = 0.5 * cos(u[1]) + p[0], n1 = 0.25 * sin(u[0]) + p[0] * p[0]; \
      err = fabs(n0 - u[0]) + fabs(n1 - u[1]);                               \
      u[0] = n0;                                                             \
      u[1] = n1;                                                             \
    } while (err > 1e-15);                                                   \
    return u[0] + 3 * u[1];                                                  \
  }
SOLVE(plain, (void)0)
SOLVE(marked, __enzyme_set_fixed_point(&red, &most, (void *)0, u, &bytes))
SOLVE(controlled, __enzyme_set_fixed_point(&red, &most, (void *)control, u, &bytes))

int main(void) {
  double p = 0.3, dp = 0, dp0 = 0, dpc = 0;
  __enzyme_autodiff((void *)plain, enzyme_dup, &p, &dp0, (int64_t)-1);
  __enzyme_autodiff((void *)marked, enzyme_dup, &p, &dp, (int64_t)-1);
  APPROX_EQ(dp, dp0, 1e-12);
  APPROX_EQ(dp != 0, 1, 0);
  APPROX_EQ(calls, 0, 0);
  __enzyme_autodiff((void *)controlled, enzyme_dup, &p, &dpc, (int64_t)4);
  APPROX_EQ(calls, 5, 0);
  APPROX_EQ(fabs(dpc - dp0) < 0.1 * fabs(dp0), 1, 0);
  APPROX_EQ(marked(&p, -1), plain(&p, -1), 1e-15);
  return failures;
}
