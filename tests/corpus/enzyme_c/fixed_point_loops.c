// Fixed-point iterations (<enzyme/fixed_point.h>): a periodic relaxation u = F(u, p, c) that
// also writes an output y, reads coefficients c that are overwritten after the solve (marked
// with enzyme_checkpoint_region), and a Newton iteration on a float state. The gradient
// through the fixed point equals the taped plain loop's (converged tightly) and centred
// differences; the state's adjoint is zero after it, so is y's, and the state is the plain
// loop's; a control function is called first with -1, then with each round's squared update,
// and stops the rounds; enzyme_fp_max_iters bounds them; forward mode equals the tangent of the
// plain loop whatever the initial guess's tangent; the primal alone runs the loop as it is.
#include <enzyme/fixed_point.h>
#include "test_utils.h"

#define M 5

void __enzyme_autodiff(void *, ...);
void __enzyme_fwddiff(void *, ...);

__attribute__((noinline)) static int relax(int64_t i, double *u, const double *p,
                                           const double *c, double *y, const double *tol) {
  (void)i;
  double next[M], change = 0;
  for (int k = 0; k < M; k++)
    next[k] = 0.25 * (u[(k + M - 1) % M] + u[(k + 1) % M]) + c[0] * cos(u[k] + p[k]) +
              p[k] * p[k];
  for (int k = 0; k < M; k++) {
    y[k] = next[k] * u[k] + p[k];
    change = fmax(change, fabs(next[k] - u[k]));
    u[k] = next[k];
  }
  return change > *tol;
}

static double loss(const double *u, const double *y) {
  double s = 0;
  for (int k = 0; k < M; k++) s += u[k] * u[k] * (k + 1) + sin(y[k]);
  return s;
}

double plain(double *u, const double *p, double *c, double *y, const double *tol) {
  int64_t i = 0;
  while (relax(i++, u, p, c, y, tol))
    ;
  c[0] = 0;  // later code overwrites what the steps read
  return loss(u, y);
}

double fixed(double *u, const double *p, double *c, double *y, const double *tol) {
  __enzyme_fixed_point((void *)relax, enzyme_fp_state, u, (int64_t)(M * sizeof(double)),
                       enzyme_checkpoint_region, c, (int64_t)sizeof(double),
                       enzyme_fp_reduction, 1e-28, u, p, c, y, tol);
  c[0] = 0;
  return loss(u, y);
}

// The control function's record of its calls.
static int calls, stop_after;
static double measures[16];

static int control(double *cumul, double *reduction) {
  (void)reduction;
  if (calls < 16) measures[calls] = *cumul;
  calls++;
  return calls <= stop_after;
}

double controlled(double *u, const double *p, double *c, double *y, const double *tol) {
  __enzyme_fixed_point((void *)relax, enzyme_fp_state, u, (int64_t)(M * sizeof(double)),
                       enzyme_checkpoint_region, c, (int64_t)sizeof(double),
                       enzyme_fp_control, control, enzyme_fp_max_iters, 6, u, p, c, y, tol);
  c[0] = 0;
  return loss(u, y);
}

// Newton's iteration for sqrt(a), in floats (which only a function the step calls reads and
// writes): its step has a zero derivative in the state at the fixed point.
__attribute__((noinline)) static int newton_update(float *x, const float *a) {
  float next = 0.5f * (x[0] + a[0] / x[0]);
  int again = fabsf(next - x[0]) > 1e-6f * next;
  x[0] = next;
  return again;
}

__attribute__((noinline)) static int newton(int64_t i, float *x, const float *a) {
  (void)i;
  return newton_update(x, a);
}

void root(float *x, const float *a, float *out) {
  __enzyme_fixed_point((void *)newton, enzyme_fp_state, x, (int64_t)sizeof(float), x, a);
  out[0] = 3 * x[0];
}

static double sum(const double *v) {
  double s = 0;
  for (int k = 0; k < M; k++) s += v[k];
  return s;
}

static void start(double *u, double *p, double *c, double *y) {
  for (int k = 0; k < M; k++) {
    u[k] = 0.1 * k;
    p[k] = 0.2 + 0.15 * sin(k + 1.0);
    y[k] = 0;
  }
  c[0] = 0.4;
}

int main(void) {
  const double tol = 1e-15;
  // The shadows of u and y seed their final values (ones, here), in both.
  double u0[M], p0[M], c0[1], y0[M], du0[M], dp0[M] = {0}, dy0[M];
  start(u0, p0, c0, y0);
  for (int k = 0; k < M; k++) du0[k] = dy0[k] = 1;
  __enzyme_autodiff((void *)plain, enzyme_dup, u0, du0, enzyme_dup, p0, dp0, enzyme_const, c0,
                    enzyme_dup, y0, dy0, enzyme_const, &tol);

  double u[M], p[M], c[1], y[M], du[M], dp[M] = {0}, dy[M];
  start(u, p, c, y);
  for (int k = 0; k < M; k++) du[k] = dy[k] = 1;
  __enzyme_autodiff((void *)fixed, enzyme_dup, u, du, enzyme_dup, p, dp, enzyme_const, c,
                    enzyme_dup, y, dy, enzyme_const, &tol);
  for (int k = 0; k < M; k++) {
    APPROX_EQ(dp[k], dp0[k], 1e-10);
    APPROX_EQ(du[k], 0, 0);
    APPROX_EQ(dy[k], 0, 0);
    APPROX_EQ(u[k], u0[k], 1e-14);
    // Centred differences of the converged loop (with the seeded sums of u and y).
    double uu[M], pp[M], cc[1], yy[M], h = 1e-6, up, down;
    start(uu, pp, cc, yy);
    pp[k] += h;
    up = plain(uu, pp, cc, yy, &tol) + sum(uu) + sum(yy);
    start(uu, pp, cc, yy);
    pp[k] -= h;
    down = plain(uu, pp, cc, yy, &tol) + sum(uu) + sum(yy);
    APPROX_EQ(dp[k], (up - down) / (2 * h), 1e-6);
  }
  APPROX_EQ(c[0], 0, 0);

  // Three rounds, as the control function says: four calls, the first with -1, then the
  // squared updates, which shrink; the gradient is near the converged one but not on it.
  calls = 0;
  stop_after = 3;
  double dpc[M] = {0}, diff = 0, ref = 0;
  start(u, p, c, y);
  for (int k = 0; k < M; k++) du[k] = dy[k] = 1;
  __enzyme_autodiff((void *)controlled, enzyme_dup, u, du, enzyme_dup, p, dpc, enzyme_const,
                    c, enzyme_dup, y, dy, enzyme_const, &tol);
  APPROX_EQ(calls, 4, 0);
  APPROX_EQ(measures[0], -1, 0);
  APPROX_EQ(measures[1] > 0 && measures[2] < measures[1] && measures[3] < measures[2], 1, 0);
  for (int k = 0; k < M; k++) {
    diff = fmax(diff, fabs(dpc[k] - dp0[k]));
    ref = fmax(ref, fabs(dp0[k]));
  }
  APPROX_EQ(diff > 1e-12 * ref && diff < 0.1 * ref, 1, 0);
  // A control function that never stops: enzyme_fp_max_iters (6) does.
  calls = 0;
  stop_after = 100;
  start(u, p, c, y);
  for (int k = 0; k < M; k++) dpc[k] = du[k] = dy[k] = 0;
  __enzyme_autodiff((void *)controlled, enzyme_dup, u, du, enzyme_dup, p, dpc, enzyme_const,
                    c, enzyme_dup, y, dy, enzyme_const, &tol);
  APPROX_EQ(calls, 7, 0);

  // Forward mode: the tangent of the converged state, whatever the guess's tangent.
  double dir[M] = {1, -0.5, 0.25, 2, 0.75}, tu0[M] = {0}, ty0[M] = {0}, tu[M], ty[M] = {0};
  start(u0, p0, c0, y0);
  __enzyme_fwddiff((void *)plain, enzyme_dup, u0, tu0, enzyme_dup, p0, dir, enzyme_const, c0,
                   enzyme_dup, y0, ty0, enzyme_const, &tol);
  start(u, p, c, y);
  for (int k = 0; k < M; k++) tu[k] = 7;
  __enzyme_fwddiff((void *)fixed, enzyme_dup, u, tu, enzyme_dup, p, dir, enzyme_const, c,
                   enzyme_dup, y, ty, enzyme_const, &tol);
  for (int k = 0; k < M; k++) {
    APPROX_EQ(tu[k], tu0[k], 1e-10);
    APPROX_EQ(ty[k], ty0[k], 1e-9);
    APPROX_EQ(u[k], u0[k], 1e-14);
  }

  // A float state: d(3 sqrt(a))/da.
  float x = 1, a = 2, dx = 0, da = 0, out = 0, dout = 1;
  __enzyme_autodiff((void *)root, enzyme_dup, &x, &dx, enzyme_dup, &a, &da, enzyme_dup, &out,
                    &dout);
  APPROX_EQ(da, 1.5 / sqrt(2.0), 1e-6);
  APPROX_EQ(x, sqrt(2.0), 1e-6);
  APPROX_EQ(dx, 0, 0);

  // The primal alone.
  start(u0, p0, c0, y0);
  start(u, p, c, y);
  APPROX_EQ(fixed(u, p, c, y, &tol), plain(u0, p0, c0, y0, &tol), 1e-14);
  return failures;
}
