// Two-level checkpointing: an outer checkpointed loop over segments whose step is itself a
// checkpointed loop over the segment's steps, the outer snapshots in files (config.spill_dir)
// and the inner in memory. The inner step updates a global the outer step never names: the
// outer snapshots must hold it too. The gradient equals the taped plain loop's and centred
// differences; each outer step is differentiated once; no snapshot file is left behind.
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <enzyme/checkpoint.h>
#include <unistd.h>
#include "test_utils.h"

#define M 3

void __enzyme_autodiff(void *, ...);

static double drift[M];

__attribute__((noinline)) static void step(int64_t i, double *u, const double *c) {
  double next[M];
  for (int k = 0; k < M; k++)
    next[k] = u[k] + c[0] * (u[(k + 1) % M] - u[k]) + 0.05 * sin(drift[k] + 0.1 * (double)i);
  for (int k = 0; k < M; k++) {
    drift[k] = 0.7 * drift[k] + c[1] * next[k] * u[k];
    u[k] = next[k];
  }
}

typedef struct {
  int64_t inner;
  EnzymeCkptConfig *config;
} Inner;

__attribute__((noinline)) static void segment(int64_t s, double *u, const double *c,
                                              Inner *in) {
  __enzyme_checkpoint_for((void *)step, s * in->inner, in->inner, enzyme_scheme,
                          &EnzymeCkptRevolve, in->config, enzyme_checkpoint_region, u,
                          (int64_t)(M * sizeof(double)), u, c);
}

static double loss(const double *u) {
  double s = 0;
  for (int k = 0; k < M; k++) s += u[k] * u[k] * (k + 1) + drift[k];
  return s;
}

static void reset(void) {
  for (int k = 0; k < M; k++) drift[k] = 0.1 * k;
}

double plain(double *u, const double *c, int64_t n) {
  reset();
  for (int64_t i = 0; i < n; i++) step(i, u, c);
  return loss(u);
}

double two_level(double *u, const double *c, int64_t outer, Inner *in, EnzymeCkptConfig *oc) {
  reset();
  __enzyme_checkpoint_for((void *)segment, 0, outer, enzyme_scheme, &EnzymeCkptPeriodic, oc,
                          enzyme_checkpoint_region, u, (int64_t)(M * sizeof(double)), u, c,
                          in);
  return loss(u);
}

static void start(double *u, double *c) {
  for (int k = 0; k < M; k++) u[k] = 0.5 + 0.2 * k;
  c[0] = 0.2;
  c[1] = 0.1;
}

static int files_in(const char *dir) {
  int count = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') count++;
  closedir(d);
  return count;
}

int main(void) {
  // (outer steps, inner steps, outer segments, inner slots)
  int64_t cases[][4] = {{1, 1, 1, 1}, {2, 3, 1, 2}, {3, 4, 2, 2}, {5, 3, 2, 1}, {4, 6, 4, 3}};
  char dir[] = "/tmp/pyzyme_ckpt_nestedXXXXXX";
  if (!mkdtemp(dir)) return 1;
  for (unsigned a = 0; a < sizeof(cases) / sizeof(cases[0]); a++) {
    int64_t outer = cases[a][0], n = outer * cases[a][1];
    double u0[M], c0[2], du0[M] = {0}, dc0[2] = {0};
    start(u0, c0);
    __enzyme_autodiff((void *)plain, enzyme_dup, u0, du0, enzyme_dup, c0, dc0, enzyme_const,
                      n);
    for (int j = 0; j < 2; j++) {
      double u[M], c[2], h = 1e-6, up, down;
      start(u, c);
      c[j] += h;
      up = plain(u, c, n);
      start(u, c);
      c[j] -= h;
      down = plain(u, c, n);
      APPROX_EQ(dc0[j], (up - down) / (2 * h), 1e-6);
    }
    double u[M], c[2], du[M] = {0}, dc[2] = {0};
    EnzymeCkptStats stats;
    EnzymeCkptConfig oc = {cases[a][2], 0, dir, 0, &stats};
    EnzymeCkptConfig ic = {cases[a][3], 0, NULL, 0, NULL};
    Inner in = {cases[a][1], &ic};
    memset(&stats, 0, sizeof(stats));
    start(u, c);
    __enzyme_autodiff((void *)two_level, enzyme_dup, u, du, enzyme_dup, c, dc, enzyme_const,
                      outer, enzyme_const, &in, enzyme_const, &oc);
    for (int k = 0; k < M; k++) APPROX_EQ(du[k], du0[k], 1e-12);
    APPROX_EQ(dc[0], dc0[0], 1e-12);
    APPROX_EQ(dc[1], dc0[1], 1e-12);
    APPROX_EQ(stats.taped_steps, outer, 0);
    APPROX_EQ(stats.stores >= 1, 1, 0);
    APPROX_EQ(files_in(dir), 0, 0);
    // The primal alone.
    start(u0, c0);
    double want = plain(u0, c0, n);
    start(u, c);
    APPROX_EQ(two_level(u, c, outer, &in, &oc), want, 1e-14);
  }
  rmdir(dir);
  return failures;
}
