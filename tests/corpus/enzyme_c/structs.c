// Structs: a particle array, the kinetic plus spring energy, gradient into a shadow array.
#include "test_utils.h"

typedef struct { double x, v; int id; double m; } Particle;
void __enzyme_autodiff(void *, ...);

double energy(const Particle *p, int n, double k) {
  double e = 0;
  for (int i = 0; i < n; i++) {
    e += 0.5 * p[i].m * p[i].v * p[i].v;
    if (i > 0) {
      double d = p[i].x - p[i - 1].x;
      e += 0.5 * k * d * d;
    }
  }
  return e;
}

int main(void) {
  Particle p[3] = {{0.0, 1.0, 0, 2.0}, {1.2, -0.5, 1, 1.0}, {2.1, 0.3, 2, 3.0}};
  Particle dp[3] = {{0}};
  double k = 4.0;
  __enzyme_autodiff((void *)energy, p, dp, 3, enzyme_const, k);
  for (int i = 0; i < 3; i++) {
    APPROX_EQ(dp[i].v, p[i].m * p[i].v, 1e-12);
    APPROX_EQ(dp[i].m, 0.5 * p[i].v * p[i].v, 1e-12);
    double f = 0;
    if (i > 0) f += k * (p[i].x - p[i - 1].x);
    if (i < 2) f -= k * (p[i + 1].x - p[i].x);
    APPROX_EQ(dp[i].x, f, 1e-12);
  }
  return failures;
}
