// __enzyme_register_derivative: forward-mode rules, one returning { primal, tangent }, one
// writing through pointers (each followed by its shadow), also in vector mode (width 2).
#include "test_utils.h"

double __enzyme_fwddiff(void *, ...);
typedef struct { double a, b; } pair;
pair __enzyme_fwddiff2(void *, ...) __asm__("__enzyme_fwddiff_w2");

static int calls = 0;

__attribute__((noinline)) double softplus(double x) { return log(1 + exp(x)); }
pair softplus_fwd(double x, double dx) {
  calls++;
  pair out = {x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)), dx / (1 + exp(-x))};
  return out;
}
void *__enzyme_register_derivative_softplus[2] = {(void *)softplus, (void *)softplus_fwd};

__attribute__((noinline)) void cube_(const double *src, double *dest) {
  *dest = *src * *src * *src;
}
void cube_fwd(const double *src, const double *d_src, double *dest, double *d_dest) {
  calls++;
  *dest = *src * *src * *src;
  *d_dest = 3 * *src * *src * *d_src;
}
void *__enzyme_register_derivative_cube[] = {(void *)cube_, (void *)cube_fwd};

double wide(double x) { return softplus(x); }  // rules apply to calls, not to the target

double f(double x) {
  double y;
  cube_(&x, &y);
  return softplus(x) * y;
}

int main(void) {
  double x = 0.7, sp = log1p(exp(x)), sig = 1 / (1 + exp(-x));
  double want = sig * x * x * x + sp * 3 * x * x;
  APPROX_EQ(__enzyme_fwddiff((void *)f, x, 1.0), want, 1e-12);
  APPROX_EQ(__enzyme_fwddiff((void *)wide, 900.0, 2.0), 2.0, 1e-12);  // the body: NaN
  pair both = __enzyme_fwddiff2((void *)f, enzyme_width, 2, x, 1.0, -3.0);
  APPROX_EQ(both.a, want, 1e-12);
  APPROX_EQ(both.b, -3 * want, 1e-12);
  if (calls != 2 + 1 + 4) {
    fprintf(stderr, "rules called %d times, expected 7\n", calls);
    failures++;
  }
  return failures;
}
