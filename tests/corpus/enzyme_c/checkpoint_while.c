// Checkpointed while loops (__enzyme_checkpoint_while of <enzyme/checkpoint.h>): a step that
// grows its state (a marked region, and a global it updates) until the state's norm passes a
// limit, so the number of steps is known only when the loop ends. For limits ending it after
// the first step, a few and many, the gradient equals the taped loop's and centred
// differences, the state after it is the plain forward pass's, every step is differentiated
// once and stored once (EnzymeCkptStoreAll's online protocol), and forward mode through it
// equals forward mode through the plain loop.
#include <enzyme/checkpoint.h>
#include "test_utils.h"

#define M 3

void __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
extern int enzyme_scheme, enzyme_checkpoint_region;

static double memory[M];
static int64_t ran;

__attribute__((noinline)) static int grow(int64_t i, double *u, const double *c,
                                          const double *limit) {
  double next[M], norm = 0;
  for (int k = 0; k < M; k++)
    next[k] = u[k] * (1.0 + c[0]) + c[1] * sin(u[(k + 1) % M] + memory[k]) + 0.01 * (double)i;
  for (int k = 0; k < M; k++) {
    memory[k] = 0.7 * memory[k] + 0.1 * next[k];
    u[k] = next[k];
    norm += u[k] * u[k];
  }
  ran++;
  return norm < *limit;
}

static double loss(const double *u) {
  double s = 0;
  for (int k = 0; k < M; k++) s += u[k] * u[k] * (k + 1) + memory[k] * memory[k];
  return s;
}

static void reset(void) {
  for (int k = 0; k < M; k++) memory[k] = 0.05 * k;
}

double plain(double *u, const double *c, const double *limit) {
  int64_t i = 0;
  reset();
  while (grow(i++, u, c, limit))
    ;
  return loss(u);
}

double checkpointed(double *u, const double *c, const double *limit, EnzymeCkptConfig *config) {
  reset();
  __enzyme_checkpoint_while((void *)grow, enzyme_scheme, &EnzymeCkptStoreAll, config,
                            enzyme_checkpoint_region, u, (int64_t)(M * sizeof(double)), u, c,
                            limit);
  return loss(u);
}

static void start(double *u, double *c) {
  for (int k = 0; k < M; k++) u[k] = 0.4 + 0.1 * k;
  c[0] = 0.1;
  c[1] = 0.05;
}

int main(void) {
  // The norm starts near 0.77: these limits end the loop after 1 step, a few, and many.
  double limits[] = {0.1, 1.0, 3.0, 40.0};
  for (unsigned l = 0; l < sizeof(limits) / sizeof(limits[0]); l++) {
    const double *limit = &limits[l];
    double u0[M], c0[2], du0[M] = {0}, dc0[2] = {0}, after[M];
    int64_t n;
    start(u0, c0);
    ran = 0;
    plain(u0, c0, limit);
    n = ran;
    start(u0, c0);
    __enzyme_autodiff((void *)plain, enzyme_dup, u0, du0, enzyme_dup, c0, dc0, enzyme_const,
                      limit);
    for (int k = 0; k < M; k++) after[k] = u0[k];
    // Centred differences for the coefficients (small enough not to change the step count).
    for (int j = 0; j < 2; j++) {
      double u[M], c[2], h = 1e-7, up, down;
      start(u, c);
      c[j] += h;
      up = plain(u, c, limit);
      start(u, c);
      c[j] -= h;
      down = plain(u, c, limit);
      APPROX_EQ(dc0[j], (up - down) / (2 * h), 1e-5);
    }
    {
      double u[M], c[2], du[M] = {0}, dc[2] = {0};
      EnzymeCkptStats stats;
      EnzymeCkptConfig config = {1, 0, NULL, 0, &stats};
      memset(&stats, 0, sizeof(stats));
      start(u, c);
      __enzyme_autodiff((void *)checkpointed, enzyme_dup, u, du, enzyme_dup, c, dc,
                        enzyme_const, limit, enzyme_const, &config);
      for (int k = 0; k < M; k++) {
        APPROX_EQ(du[k], du0[k], 1e-12);
        APPROX_EQ(u[k], after[k], 1e-14);
      }
      APPROX_EQ(dc[0], dc0[0], 1e-12);
      APPROX_EQ(dc[1], dc0[1], 1e-12);
      APPROX_EQ(stats.taped_steps, n, 0);
      APPROX_EQ(stats.stores, n, 0);
      APPROX_EQ(n >= 1, 1, 0);
    }
    // Forward mode: the tangents of each step, until a step returns false.
    {
      double u[M], c[2], du[M] = {0}, dc[2] = {0.3, 1}, want;
      EnzymeCkptConfig config = {1, 0, NULL, 0, NULL};
      start(u, c);
      want = __enzyme_fwddiff((void *)plain, enzyme_dup, u, du, enzyme_dup, c, dc,
                              enzyme_const, limit);
      start(u, c);
      for (int k = 0; k < M; k++) du[k] = 0;
      ran = 0;
      APPROX_EQ(__enzyme_fwddiff((void *)checkpointed, enzyme_dup, u, du, enzyme_dup, c, dc,
                                 enzyme_const, limit, enzyme_const, &config),
                want, 1e-12);
      APPROX_EQ(ran, n, 0);
      // The primal alone runs the loop as it is.
      start(u, c);
      want = plain(u, c, limit);
      start(u, c);
      APPROX_EQ(checkpointed(u, c, limit, &config), want, 1e-14);
    }
  }
  return failures;
}
