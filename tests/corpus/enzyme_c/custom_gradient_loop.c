// A registered gradient called in a loop, its augmented forward pass returning
// { tape, primal }: each iteration's tape (a heap block) reaches its own reverse call.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

static int live_tapes = 0, reversed = 0;

// The body is a bit trick pyzyme must not differentiate (the integer part has no derivative).
__attribute__((noinline)) double invsqrt(double x) {
  union { double d; long long i; } u = {x};
  u.i = 0x5fe6eb50c7b537a9LL - (u.i >> 1);
  double y = u.d;
  for (int k = 0; k < 4; k++) y = y * (1.5 - 0.5 * x * y * y);
  return y;
}
typedef struct { double *tape; double primal; } invsqrt_aug_t;
invsqrt_aug_t invsqrt_aug(double x) {
  double *t = malloc(sizeof(double));
  *t = 1 / sqrt(x);
  live_tapes++;
  invsqrt_aug_t out = {t, *t};
  return out;
}
double invsqrt_rev(double x, double seed, double *tape) {
  double y = *tape;
  free(tape);
  live_tapes--;
  reversed++;
  return seed * -0.5 * y * y * y;
}
void *__enzyme_register_gradient_invsqrt[3] = {(void *)invsqrt, (void *)invsqrt_aug,
                                               (void *)invsqrt_rev};

// sum_i x_i * invsqrt(x_i) = sum_i sqrt(x_i); x is overwritten after it is read.
double norm_like(double *x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) {
    s += x[i] * invsqrt(x[i]);
    x[i] = 0;
  }
  return s;
}

int main(void) {
  enum { N = 7 };
  double x[N], dx[N] = {0}, x0[N];
  for (int i = 0; i < N; i++) x0[i] = x[i] = 0.5 + i;
  __enzyme_autodiff((void *)norm_like, x, dx, N);
  for (int i = 0; i < N; i++) APPROX_EQ(dx[i], 0.5 / sqrt(x0[i]), 1e-12);
  if (reversed != N || live_tapes != 0) {
    fprintf(stderr, "reversed %d times (expected %d), %d tapes left\n", reversed, N,
            live_tapes);
    failures++;
  }
  return failures;
}
