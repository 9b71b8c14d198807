// Enzyme's gradient log: a program that defines enzymeLogGrad is called back in the reverse
// sweep with the adjoint of each floating-point result (its opcode, the function called, the
// function differentiated), here f(x, y) = sin(x y) + x / y: four results, their adjoints 1
// (the sum), 1 (sin's result), cos(x y) (the product), 1 (the quotient).
#include <string.h>
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

static int events;
static double logged_sum, logged_fmul;
static int saw_sin, saw_f;

void enzymeLogGrad(double grad, const char *op, const char *callee, const char *module,
                   const char *function, unsigned block, unsigned index) {
  (void)module, (void)block, (void)index;
  events++;
  logged_sum += grad;
  if (strcmp(op, "fmul") == 0) logged_fmul = grad;
  if (strstr(callee, "sin")) saw_sin++;
  if (strcmp(function, "f") == 0) saw_f++;
}

double f(double x, double y) { return sin(x * y) + x / y; }

int main(void) {
  double x = 0.7, y = 1.3;
  double dx = __enzyme_autodiff((void *)f, x, enzyme_const, y);
  APPROX_EQ(dx, y * cos(x * y) + 1 / y, 1e-12);
  APPROX_EQ(events, 4, 0);
  APPROX_EQ(saw_f, 4, 0);
  APPROX_EQ(saw_sin, 1, 0);
  APPROX_EQ(logged_fmul, cos(x * y), 1e-12);
  APPROX_EQ(logged_sum, 3 + cos(x * y), 1e-12);
  return failures;
}
