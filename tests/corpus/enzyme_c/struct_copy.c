// Struct assignment (a memcpy) and a struct returned by value inside the function.
#include "test_utils.h"
#include <string.h>

typedef struct { double a[4]; double w; } State;
void __enzyme_autodiff(void *, ...);

static State step(State s) {
  State t = s;
  for (int i = 0; i < 4; i++) t.a[i] = s.a[i] * s.w;
  return t;
}

double run(const State *s0) {
  State s;
  memcpy(&s, s0, sizeof s);
  s = step(step(s));
  double r = 0;
  for (int i = 0; i < 4; i++) r += s.a[i];
  return r;
}

int main(void) {
  State s = {{1, 2, 3, 4}, 1.5}, ds = {{0}, 0};
  __enzyme_autodiff((void *)run, &s, &ds);
  for (int i = 0; i < 4; i++) APPROX_EQ(ds.a[i], s.w * s.w, 1e-12);
  APPROX_EQ(ds.w, 2 * s.w * 10.0, 1e-12);
  return failures;
}
