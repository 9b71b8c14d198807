// Registered derivatives of functions small enough for clang to inline (-O1 and above), which
// must still be called as registered; a gradient whose augmented forward function returns
// nothing (no tape, no primal), so the primal result comes from the function itself.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double cube(double x) { return x * x * x; }
void cube_aug(double x) { (void)x; }
// Twice the true derivative, so that the rule and the code cannot be mistaken for each other.
double cube_rev(double x, double seed) { return 6 * x * x * seed; }
void *__enzyme_register_gradient_cube[3] = {(void *)cube, (void *)cube_aug, (void *)cube_rev};

double sq(double x) { return x * x; }
double sq_fwd(double x, double dx) { (void)x; return 10 * dx; }
void *__enzyme_register_derivative_sq[2] = {(void *)sq, (void *)sq_fwd};

double halve(double x) { return x / 2; }
void *__enzyme_function_like[2] = {(void *)halve, "sin"};

// d/dx [cube(x) x] with the rule: 6x^2 x + x^3 (the primal cube(x) is needed).
double f(double x) { return cube(x) * x; }
double g(double x) { return sq(x) + x; }
double h(double x) { return halve(x) * 3; }

int main(void) {
  double x = 1.3;
  APPROX_EQ(__enzyme_autodiff((void *)f, x), 7 * x * x * x, 1e-12);
  APPROX_EQ(__enzyme_fwddiff((void *)g, x, 1.0), 11.0, 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)h, x), 3 * cos(x), 1e-12);
  return failures;
}
