// Checkpointed time loops (<enzyme/checkpoint.h>): a reaction-diffusion step that carries its
// state in a marked region and in a global it updates, with coefficients read through a pointer
// every step. Each scheme's gradient equals the taped loop's and centred differences; the state
// after the gradient is the one the plain forward pass leaves; Revolve never holds more slots
// than it is given and runs exactly the optimal number of steps again; forward mode through the
// checkpointed loop equals forward mode through the plain one.
#include <enzyme/checkpoint.h>
#include "test_utils.h"

#define M 5

void __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
extern int enzyme_scheme, enzyme_checkpoint_region;

static double memory[M];

__attribute__((noinline)) static void step(int64_t i, double *u, const double *c) {
  double next[M];
  for (int k = 0; k < M; k++) {
    double lap = u[(k + 1) % M] - 2 * u[k] + u[(k + M - 1) % M];
    next[k] = u[k] + c[0] * lap + c[1] * sin(u[k] + memory[k]) + 0.001 * (double)i;
  }
  for (int k = 0; k < M; k++) {
    memory[k] = 0.5 * memory[k] + 0.25 * next[k] * next[k];
    u[k] = next[k];
  }
}

static double loss(const double *u) {
  double s = 0;
  for (int k = 0; k < M; k++) s += u[k] * u[k] * (k + 1) + memory[k];
  return s;
}

static void reset(void) {
  for (int k = 0; k < M; k++) memory[k] = 0.1 * k;
}

double plain(double *u, const double *c, int64_t n) {
  reset();
  for (int64_t i = 0; i < n; i++) step(i, u, c);
  return loss(u);
}

double checkpointed(double *u, const double *c, int64_t n, const EnzymeCheckpointScheme *s,
                    EnzymeCkptConfig *config) {
  reset();
  __enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, s, config,
                          enzyme_checkpoint_region, u, (int64_t)(M * sizeof(double)), u, c);
  return loss(u);
}

// The state lives on the stack: only the steps make it depend on the coefficients.
__attribute__((noinline)) static void mix(int64_t i, double *s, const double *c) {
  s[0] = s[0] * c[0] + s[1];
  s[1] = s[1] * 0.5 + c[1] * (double)i;
}

double local_plain(const double *c, int64_t n) {
  double s[2] = {1, 2};
  for (int64_t i = 0; i < n; i++) mix(i, s, c);
  return s[0] * s[1];
}

double local_checkpointed(const double *c, int64_t n) {
  double s[2] = {1, 2};
  EnzymeCkptConfig config = {2, 0, NULL, 0, NULL};
  __enzyme_checkpoint_for((void *)mix, 0, n, enzyme_scheme, &EnzymeCkptRevolve, &config,
                          enzyme_checkpoint_region, s, (int64_t)sizeof(s), s, c);
  return s[0] * s[1];
}

static void start(double *u, double *c) {
  for (int k = 0; k < M; k++) u[k] = 0.3 + 0.2 * sin(k + 1.0);
  c[0] = 0.2;
  c[1] = 0.05;
}

// C(s + r, s) as a double.
static double beta(int64_t s, int64_t r) {
  double b = 1;
  for (int64_t k = 1; k <= r; k++) b = b * (double)(s + k) / (double)k;
  return b;
}

int main(void) {
  const EnzymeCheckpointScheme *schemes[] = {&EnzymeCkptRevolve, &EnzymeCkptPeriodic,
                                             &EnzymeCkptStoreAll};
  int64_t steps[] = {0, 1, 2, 5, 13, 40};
  int64_t snaps[] = {1, 2, 3};
  for (unsigned a = 0; a < sizeof(steps) / sizeof(steps[0]); a++) {
    int64_t n = steps[a];
    double u0[M], c0[M], du0[M] = {0}, dc0[2] = {0}, after[M];
    start(u0, c0);
    __enzyme_autodiff((void *)plain, enzyme_dup, u0, du0, enzyme_dup, c0, dc0,
                      enzyme_const, n);
    for (int k = 0; k < M; k++) after[k] = u0[k];
    // Centred differences of the plain loop, for the coefficients.
    for (int j = 0; j < 2; j++) {
      double u[M], c[M], h = 1e-6, up, down;
      start(u, c);
      c[j] += h;
      up = plain(u, c, n);
      start(u, c);
      c[j] -= h;
      down = plain(u, c, n);
      APPROX_EQ(dc0[j], (up - down) / (2 * h), 1e-6);
    }
    for (int s = 0; s < 3; s++)
      for (unsigned b = 0; b < sizeof(snaps) / sizeof(snaps[0]); b++) {
        double u[M], c[M], du[M] = {0}, dc[2] = {0};
        EnzymeCkptStats stats;
        EnzymeCkptConfig config = {snaps[b], 0, NULL, 0, &stats};
        memset(&stats, 0, sizeof(stats));
        start(u, c);
        __enzyme_autodiff((void *)checkpointed, enzyme_dup, u, du, enzyme_dup, c, dc,
                          enzyme_const, n, enzyme_const, schemes[s], enzyme_const, &config);
        for (int k = 0; k < M; k++) {
          APPROX_EQ(du[k], du0[k], 1e-12);
          APPROX_EQ(u[k], after[k], 0);
        }
        APPROX_EQ(dc[0], dc0[0], 1e-12);
        APPROX_EQ(dc[1], dc0[1], 1e-12);
        APPROX_EQ(stats.taped_steps, n, 0);
        if (s == 0 && n > 1) {
          // Revolve: at most the slots given; the forward steps r n - C(s + 1 + r - 1, r - 1)
          // of binomial checkpointing, r the least with C(s + r, s) >= n.
          int64_t r = 0;
          while (beta(snaps[b], r) < n) r++;
          APPROX_EQ(stats.max_slots <= snaps[b], 1, 0);
          APPROX_EQ(stats.forward_steps, r * n - beta(snaps[b] + 1, r - 1), 0);
        }
      }
    // Forward mode through the checkpointed loop: tangents need no snapshots.
    double u[M], c[M], du[M] = {0}, dc[2] = {0, 1}, want;
    EnzymeCkptConfig config = {2, 0, NULL, 0, NULL};
    start(u, c);
    want = __enzyme_fwddiff((void *)plain, enzyme_dup, u, du, enzyme_dup, c, dc,
                            enzyme_const, n);
    start(u, c);
    for (int k = 0; k < M; k++) du[k] = 0;
    APPROX_EQ(__enzyme_fwddiff((void *)checkpointed, enzyme_dup, u, du, enzyme_dup, c, dc,
                               enzyme_const, n, enzyme_const, &EnzymeCkptRevolve,
                               enzyme_const, &config),
              want, 1e-12);
    // A state on the stack, made active by the steps alone.
    double dl[2] = {0}, dl0[2] = {0};
    __enzyme_autodiff((void *)local_plain, enzyme_dup, c0, dl0, enzyme_const, n);
    __enzyme_autodiff((void *)local_checkpointed, enzyme_dup, c0, dl, enzyme_const, n);
    APPROX_EQ(dl[0], dl0[0], 1e-12);
    APPROX_EQ(dl[1], dl0[1], 1e-12);
    if (n > 1) APPROX_EQ(dl0[0] != 0, 1, 0);
    // The primal alone runs the loop as it is.
    start(u0, c0);
    want = plain(u0, c0, n);
    start(u, c);
    APPROX_EQ(checkpointed(u, c, n, &EnzymeCkptRevolve, &config), want, 0);
  }
  return failures;
}
