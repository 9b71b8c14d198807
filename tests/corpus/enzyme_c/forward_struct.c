// Forward mode through structs of pointers: a tangent for every float reachable.
#include "test_utils.h"

typedef struct { double *pos; double *vel; int n; } System;
void __enzyme_fwddiff(void *, ...);

void advance(System *s, double dt) {
  for (int i = 0; i < s->n; i++) {
    s->vel[i] -= dt * sin(s->pos[i]);
    s->pos[i] += dt * s->vel[i];
  }
}

int main(void) {
  double pos[3] = {0.1, 0.5, 1.0}, vel[3] = {0, 0.2, -0.1};
  double dpos[3] = {1, 0, 0}, dvel[3] = {0, 1, 0};
  double p0[3] = {0.1, 0.5, 1.0}, v0[3] = {0, 0.2, -0.1};
  System s = {pos, vel, 3}, ds = {dpos, dvel, 3};
  double dt = 0.1;
  __enzyme_fwddiff((void *)advance, &s, &ds, enzyme_const, dt);
  // vel' = v - dt sin p, pos' = p + dt vel': tangents by the chain rule
  for (int i = 0; i < 3; i++) {
    double tp = i == 0, tv = i == 1;
    double tv1 = tv - dt * cos(p0[i]) * tp;
    APPROX_EQ(dvel[i], tv1, 1e-12);
    APPROX_EQ(dpos[i], tp + dt * tv1, 1e-12);
    APPROX_EQ(vel[i], v0[i] - dt * sin(p0[i]), 1e-12);
  }
  return failures;
}
