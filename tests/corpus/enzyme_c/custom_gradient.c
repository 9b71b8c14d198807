// __enzyme_register_gradient: a numerically better gradient (softplus far out on its tail,
// where the body's derivative is inf/inf) and a rule for a function with pointer arguments
// (each followed by its shadow) whose augmented forward pass returns a (null) tape.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

static int augmented = 0, reversed = 0;

__attribute__((noinline)) double softplus(double x) { return log(1 + exp(x)); }
// Augmented forward pass: returns the primal only (no tape).
double softplus_aug(double x) {
  augmented++;
  return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}
// Reverse pass: the primal argument, the result's seed; returns d/dx.
double softplus_rev(double x, double seed) {
  reversed++;
  return seed / (1 + exp(-x));
}
void *__enzyme_register_gradient_softplus[3] = {(void *)softplus, (void *)softplus_aug,
                                                (void *)softplus_rev};

__attribute__((noinline)) void cube_(const double *src, double *dest) {
  *dest = *src * *src * *src;
}
void *cube_aug(const double *src, const double *d_src, double *dest, double *d_dest) {
  augmented++;
  *dest = *src * *src * *src;
  return NULL;
}
void cube_rev(const double *src, double *d_src, const double *dest, double *d_dest,
              void *tape) {
  reversed++;
  *d_src += 3 * *src * *src * *d_dest;
  *d_dest = 0;
}
void *__enzyme_register_gradient_cube[] = {(void *)cube_, (void *)cube_aug, (void *)cube_rev};

double tail(double x) { return 2 * softplus(x) + x; }
double cube(double x) {
  double y;
  cube_(&x, &y);
  return y * x;  // x^4
}

int main(void) {
  APPROX_EQ(__enzyme_autodiff((void *)tail, 800.0), 3.0, 1e-12);   // the body gives NaN
  APPROX_EQ(__enzyme_autodiff((void *)tail, -1.5), 2 / (1 + exp(1.5)) + 1, 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)cube, 1.5), 4 * 1.5 * 1.5 * 1.5, 1e-12);
  if (augmented != 3 || reversed != 3) {
    fprintf(stderr, "rules called %d and %d times, expected 3\n", augmented, reversed);
    failures++;
  }
  return failures;
}
