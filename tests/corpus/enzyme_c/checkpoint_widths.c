// Forward vector mode (enzyme_width 3) through checkpointed loops, for and while: each lane
// equals forward mode of the plain loop along that lane's tangent, and centred differences;
// the primal result and state are the plain loop's.
#include <enzyme/checkpoint.h>
#include <string.h>
#include "test_utils.h"

#define M 3
#define W 3

void __enzyme_fwddiff(void *, ...);

__attribute__((noinline)) static void step(int64_t i, double *u) {
  double next[M];
  for (int k = 0; k < M; k++)
    next[k] = u[k] + 0.03 * u[(k + 1) % M] * u[k] + 0.02 * sin(u[k] + 0.1 * (double)i);
  for (int k = 0; k < M; k++) u[k] = next[k];
}

__attribute__((noinline)) static int wstep(int64_t i, double *u, const double *limit) {
  step(i, u);
  return u[0] < *limit;
}

static void outputs(const double *u, double *out) {
  out[0] = u[0] * u[1];
  out[1] = u[1] + u[2] * u[2];
  out[2] = cos(u[0]) * u[2];
}

void plain(double *u, double *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) step(i, u);
  outputs(u, out);
}

void wplain(double *u, double *out, const double *limit) {
  int64_t i = 0;
  while (wstep(i++, u, limit))
    ;
  outputs(u, out);
}

void ckpt(double *u, double *out, int64_t n, EnzymeCkptConfig *c) {
  __enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, &EnzymeCkptRevolve, c,
                          enzyme_checkpoint_region, u, (int64_t)(M * sizeof(double)), u);
  outputs(u, out);
}

void wckpt(double *u, double *out, const double *limit, EnzymeCkptConfig *c) {
  __enzyme_checkpoint_while((void *)wstep, enzyme_scheme, &EnzymeCkptStoreAll, c,
                            enzyme_checkpoint_region, u, (int64_t)(M * sizeof(double)), u,
                            limit);
  outputs(u, out);
}

static void start(double *u) {
  for (int k = 0; k < M; k++) u[k] = 0.4 + 0.3 * k;
}

int main(void) {
  double v[W][M];
  for (int j = 0; j < W; j++)
    for (int k = 0; k < M; k++) v[j][k] = (j == k) ? 1.0 : 0.2 * (j - k);
  int64_t steps[] = {0, 1, 4, 11};
  for (unsigned a = 0; a < sizeof(steps) / sizeof(steps[0]); a++) {
    int64_t n = steps[a];
    double limit = 0.45 + 0.1 * (double)n; // a while loop of about as many steps
    for (int loop = 0; loop < 2; loop++) {
      double want[W][W], fd[W][W];
      for (int j = 0; j < W; j++) {
        double u[M], du[M], out[W], dout[W] = {0}, up[W], down[W], h = 1e-6;
        start(u);
        memcpy(du, v[j], sizeof(du));
        if (loop)
          __enzyme_fwddiff((void *)wplain, enzyme_dup, u, du, enzyme_dup, out, dout,
                           enzyme_const, &limit);
        else
          __enzyme_fwddiff((void *)plain, enzyme_dup, u, du, enzyme_dup, out, dout,
                           enzyme_const, n);
        memcpy(want[j], dout, sizeof(dout));
        for (int s = 0; s < 2; s++) {
          start(u);
          for (int k = 0; k < M; k++) u[k] += (s ? -h : h) * v[j][k];
          if (loop)
            wplain(u, s ? down : up, &limit);
          else
            plain(u, s ? down : up, n);
        }
        for (int k = 0; k < W; k++) fd[j][k] = (up[k] - down[k]) / (2 * h);
      }
      EnzymeCkptConfig config = {2, 0, NULL, 0, NULL};
      double u[M], out[W], du[W][M], dout[W][W] = {{0}}, u0[M], out0[W];
      start(u);
      memcpy(du, v, sizeof(du));
      if (loop)
        __enzyme_fwddiff((void *)wckpt, enzyme_width, W, enzyme_dup, u, du[0], du[1], du[2],
                         enzyme_dup, out, dout[0], dout[1], dout[2], enzyme_const, &limit,
                         enzyme_const, &config);
      else
        __enzyme_fwddiff((void *)ckpt, enzyme_width, W, enzyme_dup, u, du[0], du[1], du[2],
                         enzyme_dup, out, dout[0], dout[1], dout[2], enzyme_const, n,
                         enzyme_const, &config);
      start(u0);
      if (loop)
        wplain(u0, out0, &limit);
      else
        plain(u0, out0, n);
      for (int k = 0; k < W; k++) APPROX_EQ(out[k], out0[k], 1e-14);
      for (int k = 0; k < M; k++) APPROX_EQ(u[k], u0[k], 1e-14);
      for (int j = 0; j < W; j++)
        for (int k = 0; k < W; k++) {
          APPROX_EQ(dout[j][k], want[j][k], 1e-12);
          APPROX_EQ(dout[j][k], fd[j][k], 1e-6);
        }
    }
  }
  return failures;
}
