// Enzyme's default shadows of globals: __enzyme_shadow(&g, width, lane) names the shadow of
// g that derivative calls of that width without enzyme_context use (reverse mode adds into
// it, forward mode reads tangents from it; one shadow per lane of each width). A global the
// program does not ask about stays a constant of the derivatives.
#include "test_utils.h"

void *__enzyme_shadow(void *, int, int);
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
typedef struct {
  double d0, d1;
} Pair;
Pair __enzyme_fwddiff2(void *, ...) __asm__("__enzyme_fwddiff");

double g = 2.0;
struct {
  double a, b;
} blk = {1.0, 3.0};
double fixed = 5.0;  // never asked about: a constant

// g x^2 + blk.b x + fixed x^3
double f(double x) { return g * x * x + blk.b * x + fixed * x * x * x; }

int main(void) {
  double *dg = (double *)__enzyme_shadow(&g, 1, 0);
  double *db = (double *)__enzyme_shadow(&blk.b, 1, 0);
  double *da = (double *)__enzyme_shadow(&blk.a, 1, 0);
  APPROX_EQ((double)(da + 1 == db), 1.0, 0);
  double x = 1.5, dfdx = 2 * g * x + blk.b + 3 * fixed * x * x;
  APPROX_EQ(__enzyme_autodiff((void *)f, x), dfdx, 1e-12);
  APPROX_EQ(*dg, x * x, 1e-12);
  APPROX_EQ(*db, x, 1e-12);
  APPROX_EQ(*da, 0.0, 0);
  __enzyme_autodiff((void *)f, x);  // the shadows accumulate
  APPROX_EQ(*dg, 2 * x * x, 1e-12);

  *dg = 1.0;
  *db = 0.0;
  APPROX_EQ(__enzyme_fwddiff((void *)f, x, 0.0), x * x, 1e-12);
  APPROX_EQ(__enzyme_fwddiff((void *)f, x, 1.0), x * x + dfdx, 1e-12);

  double *dg0 = (double *)__enzyme_shadow(&g, 2, 0);
  double *dg1 = (double *)__enzyme_shadow(&g, 2, 1);
  double *db1 = (double *)__enzyme_shadow(&blk.b, 2, 1);
  APPROX_EQ(*dg0 + *dg1 + *db1, 0.0, 0);  // width 2 has shadows of its own
  *dg0 = 1.0;
  *db1 = 1.0;
  Pair t = __enzyme_fwddiff2((void *)f, enzyme_width, 2, x, 0.0, 0.0);
  APPROX_EQ(t.d0, x * x, 1e-12);
  APPROX_EQ(t.d1, x, 1e-12);
  APPROX_EQ(*dg, 1.0, 0);
  return failures;
}
