// Fixed-point loops marked from inside with __enzyme_set_fixed_point, which pyzyme outlines
// into a step of __enzyme_fixed_point: a counted for loop on a local state reading a local
// that later code overwrites, a while loop tested by `&&` that carries an error, a count and
// a tolerance it tightens, a do-while loop whose adjoint rounds a control function and a
// limit computed at run time decide, and a marked loop nested in a plain one. Each gradient
// equals the taped plain loop's (converged) and centred differences; the marked loop's values
// (the state, the count) are the plain loop's; forward mode equals the plain loop's tangent.
#include <enzyme/fixed_point.h>
#include "test_utils.h"

#define M 4

void __enzyme_autodiff(void *, ...);
void __enzyme_fwddiff(void *, ...);

// One relaxation sweep, u = G(u, p, a) (a contraction): the largest change.
__attribute__((noinline)) static double sweep(double *u, const double *p, double a) {
  double next[M], change = 0;
  for (int k = 0; k < M; k++)
    next[k] = 0.3 * sin(u[(k + 1) % M] - u[k]) + a * p[k] + 0.1 * cos(p[k] * u[k]);
  for (int k = 0; k < M; k++) {
    change = fmax(change, fabs(next[k] - u[k]));
    u[k] = next[k];
  }
  return change;
}

static double energy(const double *u) {
  double s = 0;
  for (int k = 0; k < M; k++) s += u[k] * u[k] * (k + 1);
  return s;
}

#define MARK(state) \
  __enzyme_set_fixed_point(1e-28, (int64_t)-1, (void *)0, state, (int64_t)sizeof(state))

// A counted loop; a is read by each step and overwritten after the loop.
#define COUNTED(name, mark)                                           \
  double name(const double *p, double *out) {                         \
    double u[M] = {0}, a = p[0] * p[1];                               \
    for (int it = 0; it < 90; it++) {                                 \
      mark;                                                           \
      sweep(u, p, a);                                                 \
    }                                                                 \
    a = 0;                                                            \
    for (int k = 0; k < M; k++) out[k] = u[k];                        \
    return energy(u) + a;                                             \
  }
COUNTED(counted_plain, (void)0)
COUNTED(counted_fp, MARK(u))

// Tested first by two conditions; the error, count and tolerance go from step to step.
#define TESTED(name, mark)                                            \
  double name(const double *p, double *out) {                         \
    double u[M], err = 1, tol = 1e-6;                                 \
    long n = 0;                                                       \
    for (int k = 0; k < M; k++) u[k] = 1;                             \
    while (err > 0 && n < 500) {                                      \
      mark;                                                           \
      err = sweep(u, p, 0.5);                                         \
      if (err < tol) err = 0;                                         \
      tol = fmax(0.1 * tol, 1e-15);                                   \
      n++;                                                            \
    }                                                                 \
    out[0] = n;                                                       \
    return energy(u);                                                 \
  }
TESTED(tested_plain, (void)0)
TESTED(tested_fp, MARK(u))

// Tested at the end; the adjoint rounds stop by a control function and a limit given at
// run time.
static int calls;
static double first;

static int control(double *cumul, double *reduction) {
  (void)reduction;
  if (calls++ == 0) first = *cumul;
  return 1;
}

double limited(const double *p, long most) {
  double u[M] = {0}, err;
  do {
    __enzyme_set_fixed_point(-1.0, most, (void *)control, u, (int64_t)sizeof(u));
    err = sweep(u, p, 0.5);
  } while (err > 1e-15);
  return energy(u);
}

// Marked inside a plain loop, which reads what each solve ends in.
#define NESTED(name, mark)                                            \
  double name(const double *p) {                                      \
    double u[M] = {0}, s = 0;                                         \
    for (int r = 0; r < 2; r++) {                                     \
      double err;                                                     \
      do {                                                            \
        mark;                                                         \
        err = sweep(u, p, 0.5 + r);                                   \
      } while (err > 1e-15);                                          \
      s += (r + 1) * energy(u);                                       \
    }                                                                 \
    return s;                                                         \
  }
NESTED(nested_plain, (void)0)
NESTED(nested_fp, MARK(u))

static double nested_value(const double *p, double *out) {
  (void)out;
  return nested_plain(p);
}

// The gradient of f against the plain loop's and centred differences of the plain loop.
#define COMPARE(f, plain)                                                         \
  {                                                                              \
    double q[M] = {0.3, 0.5, 0.2, 0.4}, dq[M] = {0}, dq0[M] = {0}, o[M],         \
           dout[M] = {0};                                                        \
    __enzyme_autodiff((void *)plain, enzyme_dup, q, dq0, enzyme_dup, o, dout);  \
    __enzyme_autodiff((void *)f, enzyme_dup, q, dq, enzyme_dup, o, dout);       \
    for (int k = 0; k < M; k++) {                                                \
      double h = 1e-6, pp[M], up, down;                                          \
      for (int j = 0; j < M; j++) pp[j] = q[j];                                  \
      pp[k] += h;                                                                \
      up = plain(pp, o);                                                         \
      pp[k] -= 2 * h;                                                            \
      down = plain(pp, o);                                                       \
      APPROX_EQ(dq[k], dq0[k], 1e-10);                                           \
      APPROX_EQ(dq[k], (up - down) / (2 * h), 1e-6);                             \
      APPROX_EQ(dq[k] != 0, 1, 0);                                               \
    }                                                                            \
  }

int main(void) {
  double p[M] = {0.3, 0.5, 0.2, 0.4}, out0[M], out[M];
  COMPARE(counted_fp, counted_plain);
  APPROX_EQ(counted_fp(p, out), counted_plain(p, out0), 1e-14);
  for (int k = 0; k < M; k++) APPROX_EQ(out[k], out0[k], 1e-14);

  COMPARE(tested_fp, tested_plain);
  APPROX_EQ(tested_fp(p, out), tested_plain(p, out0), 1e-14);
  APPROX_EQ(out[0], out0[0], 0);
  APPROX_EQ(out0[0] > 10 && out0[0] < 500, 1, 0);

  {  // nested: a gradient of p alone
    double dp[M] = {0}, dp0[M] = {0};
    __enzyme_autodiff((void *)nested_fp, enzyme_dup, p, dp);
    __enzyme_autodiff((void *)nested_plain, enzyme_dup, p, dp0);
    for (int k = 0; k < M; k++) {
      double h = 1e-6, pp[M];
      for (int j = 0; j < M; j++) pp[j] = p[j];
      pp[k] += h;
      double up = nested_value(pp, out);
      pp[k] -= 2 * h;
      double down = nested_value(pp, out);
      APPROX_EQ(dp[k], dp0[k], 1e-10);
      APPROX_EQ(dp[k], (up - down) / (2 * h), 1e-6);
    }
    APPROX_EQ(nested_fp(p), nested_plain(p), 1e-14);
  }

  {  // a control function that never stops: the limit (6, at run time) does
    double dp[M] = {0};
    calls = 0;
    __enzyme_autodiff((void *)limited, enzyme_dup, p, dp, 6L);
    APPROX_EQ(calls, 7, 0);
    APPROX_EQ(first, -1, 0);
    APPROX_EQ(dp[0] != 0, 1, 0);
  }

  {  // forward mode: the tangent of the converged state
    double dir[M] = {1, -0.5, 0.25, 2}, t0[M] = {0}, t[M] = {0};
    __enzyme_fwddiff((void *)counted_plain, enzyme_dup, p, dir, enzyme_dup, out0, t0);
    __enzyme_fwddiff((void *)counted_fp, enzyme_dup, p, dir, enzyme_dup, out, t);
    for (int k = 0; k < M; k++) {
      APPROX_EQ(t[k], t0[k], 1e-10);
      APPROX_EQ(out[k], out0[k], 1e-14);
    }
  }
  return failures;
}
