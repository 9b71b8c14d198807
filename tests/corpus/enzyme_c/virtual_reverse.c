// Reverse mode through function pointers: the shadow of a function pointer the derivative
// calls is what __enzyme_virtualreverse(f) makes (f's augmented and reverse functions), for
// functions taking floats, pointers (with their shadows) and integers, returning a float or
// nothing, called once or in a loop.
#include "test_utils.h"

void *__enzyme_virtualreverse(void *);
double __enzyme_autodiff(void *, ...);

typedef struct {
  double (*fn)(double, const double *);
  double w[2];
} Op;

// w0 x^2 + w1 sin x
double wave(double x, const double *w) { return w[0] * x * x + w[1] * sin(x); }

// op->fn(x, op->w) * x
double apply(const Op *op, double x) { return op->fn(x, op->w) * x; }

typedef struct {
  void (*add)(double *, double);
  double (*pow)(double, int);
} Sink;

void add_square(double *out, double v) { *out += v * v; }
double ipow(double x, int n) {
  double r = 1;
  for (int i = 0; i < n; i++) r *= x;
  return r;
}

// sum_i x_i^2 + x_i^3, through the sink's functions
void accumulate(const Sink *s, const double *x, double *out) {
  for (int i = 0; i < 3; i++) {
    s->add(out, x[i]);
    *out += s->pow(x[i], 3);
  }
}

int main(void) {
  Op op = {wave, {1.5, -0.5}}, dop = {0};
  dop.fn = (double (*)(double, const double *))__enzyme_virtualreverse((void *)wave);
  double x = 0.8;
  double dx = __enzyme_autodiff((void *)apply, &op, &dop, x);
  // d/dx (w0 x^3 + w1 x sin x) = 3 w0 x^2 + w1 (sin x + x cos x)
  APPROX_EQ(dx, 3 * 1.5 * x * x - 0.5 * (sin(x) + x * cos(x)), 1e-12);
  APPROX_EQ(dop.w[0], x * x * x, 1e-12);
  APPROX_EQ(dop.w[1], x * sin(x), 1e-12);

  Sink s = {add_square, ipow}, ds;
  ds.add = (void (*)(double *, double))__enzyme_virtualreverse((void *)add_square);
  ds.pow = (double (*)(double, int))__enzyme_virtualreverse((void *)ipow);
  double v[3] = {0.5, -1.0, 2.0}, dv[3] = {0}, out = 0, dout = 1.0;
  __enzyme_autodiff((void *)accumulate, &s, &ds, v, dv, &out, &dout);
  for (int i = 0; i < 3; i++) APPROX_EQ(dv[i], 2 * v[i] + 3 * v[i] * v[i], 1e-12);
  APPROX_EQ(out, 0.25 + 1 + 4 + 0.125 - 1 + 8, 1e-12);
  return failures;
}
