// Globals the differentiated code writes get shadows: a scratch array one helper fills and
// another reads, an accumulator updated from the input, the same through split mode; a
// global declared enzyme_shadow(s) takes its derivative into s (reverse mode) and its tangent
// from s (forward mode).
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
void *__enzyme_augmentfwd(void *, ...);
void __enzyme_reverse(void *, ...);

static double scratch[3];
double total = 0;
double dgain = 0;
__attribute__((enzyme_shadow(dgain))) double gain = 1.5;

__attribute__((noinline)) static void fill(const double *x) {
  for (int i = 0; i < 3; i++) scratch[i] = sin(x[i]) * x[i];
}

__attribute__((noinline)) static double sum_scratch(void) {
  double s = 0;
  for (int i = 0; i < 3; i++) s += scratch[i] * scratch[i];
  return s;
}

// sum_i (x_i sin x_i)^2
double through_scratch(const double *x) {
  fill(x);
  return sum_scratch();
}

// total is read before it is written: its value on entry is a constant of the derivative.
double accumulate(double x) {
  total = total * 0.5 + x * x;
  return total * x;
}

void accumulate_into(const double *x, double *out) { *out = accumulate(*x); }

// gain * x^3
double scaled(double x) { return gain * x * x * x; }

static double f_i(double x) { return sin(x) * x; }
static double df_i(double x) { return cos(x) * x + sin(x); }

int main(void) {
  double x[3] = {0.3, -1.2, 2.0}, dx[3] = {0};
  __enzyme_autodiff((void *)through_scratch, x, dx);
  for (int i = 0; i < 3; i++) APPROX_EQ(dx[i], 2 * f_i(x[i]) * df_i(x[i]), 1e-12);
  double v[3] = {1.0, 0.5, -2.0}, t = __enzyme_fwddiff((void *)through_scratch, x, v);
  double want = 0;
  for (int i = 0; i < 3; i++) want += 2 * f_i(x[i]) * df_i(x[i]) * v[i];
  APPROX_EQ(t, want, 1e-12);

  for (int round = 0; round < 3; round++) {  // total changes between the calls
    double y = 0.7 + round, t0 = total;
    double d = __enzyme_autodiff((void *)accumulate, y);
    // total = t0/2 + y^2 on return; d/dy (total * y) = 2y * y + total
    APPROX_EQ(total, t0 * 0.5 + y * y, 1e-12);
    APPROX_EQ(d, 2 * y * y + total, 1e-12);
    total = t0;
    APPROX_EQ(__enzyme_fwddiff((void *)accumulate, y, 1.0), 2 * y * y + total, 1e-12);
    total = t0;
    double out = 0, dout = 1.0, dy = 0;  // split: the reverse pass goes on from the shadow
    void *tape = __enzyme_augmentfwd((void *)accumulate_into, &y, &dy, &out, &dout);
    APPROX_EQ(out, (t0 * 0.5 + y * y) * y, 1e-12);
    __enzyme_reverse((void *)accumulate_into, &y, &dy, &out, &dout, tape);
    APPROX_EQ(dy, 2 * y * y + total, 1e-12);
    total = t0 * 0.5 + y * y;
  }

  dgain = 0;
  double d = __enzyme_autodiff((void *)scaled, 2.0);
  APPROX_EQ(d, 3 * gain * 4.0, 1e-12);
  APPROX_EQ(dgain, 8.0, 1e-12);  // d(gain x^3)/d gain, added into the shadow
  dgain = 1.0;
  APPROX_EQ(__enzyme_fwddiff((void *)scaled, 2.0, 0.0), 8.0, 1e-12);  // the tangent of gain
  return failures;
}
