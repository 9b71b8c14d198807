// Enzyme's checkpoint annotations on for loops (pragma and GNU attribute spellings, each
// scheme, the default snapshot count): each loop, outlined and checkpointed by pyzyme cc, has
// the primal, gradient and tangent of the same loop without the annotation. The loops carry a
// scalar from iteration to iteration, update a global, a malloc'd buffer and a buffer sized by
// __enzyme_ptr_size_hint, use a temporary of their own, and count with int and long counters,
// from a start other than zero and up to an inclusive bound.
#include <enzyme/checkpoint.h>
#include <string.h>
#include "test_utils.h"

#define M 4

void __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
void __enzyme_ptr_size_hint(void *, size_t, size_t);

double level;

#define BODY(i)                                                                      \
  {                                                                                  \
    double tmp[M];                                                                   \
    for (int k = 0; k < M; k++)                                                      \
      tmp[k] = w[k] + 0.2 * w[(k + 1) % M] * level + 0.05 * sin(w[k] + 0.1 * (i));  \
    for (int k = 0; k < M; k++) {                                                    \
      w[k] = tmp[k];                                                                 \
      out[k] = 0.5 * out[k] + tmp[k] * tmp[k];                                       \
    }                                                                                \
    level = 0.8 * level + 0.1 * w[0];                                                \
    acc += w[1] * level;                                                             \
  }

#define LOOP_FN(NAME, HEAD)                                                          \
  __attribute__((noinline)) double NAME(const double *x, double *out, long n) {     \
    double *w = (double *)malloc(M * sizeof(double));                                \
    double acc = 0, r;                                                               \
    __enzyme_ptr_size_hint(out, M * sizeof(double), 0);                              \
    memcpy(w, x, sizeof(double) * M);                                                \
    level = 0.5;                                                                     \
    HEAD BODY(i)                                                                     \
    r = acc + level;                                                                 \
    for (int k = 0; k < M; k++) r += w[k] * w[k] + out[k];                           \
    free(w);                                                                         \
    return r;                                                                        \
  }

LOOP_FN(plain, for (long i = 0; i < n; i++))
LOOP_FN(plain_int, for (int i = 2; i <= (int)n; i++))
LOOP_FN(binomial, _Pragma("enzyme checkpoint(\"binomial\", 2)") for (long i = 0; i < n; i++))
LOOP_FN(periodic, __attribute__((enzyme_checkpoint("periodic", 3))) for (long i = 0; i < n; i++))
LOOP_FN(store_all, _Pragma("enzyme checkpoint(\"store_all\")") for (long i = 0; i < n; i++))
LOOP_FN(dflt, __attribute__((enzyme_checkpointing_enable)) for (long i = 0; i < n; i++))
LOOP_FN(revolve_int, _Pragma("enzyme checkpoint(\"revolve\", 1)") for (int i = 2; i <= (int)n; i++))

// A macro: __enzyme_autodiff needs the function itself at each call.
#define CHECK(f, ref, n)                                                               \
  do {                                                                                 \
    double x[M] = {0.3, 0.7, 1.1, 1.5}, dx[M] = {0}, want[M] = {0}, o[M], o0[M];       \
    double d_o[M] = {0}, d_o0[M] = {0}, v[M] = {1, -0.5, 0.25, 2}, t[M] = {0}, t0[M] = {0}; \
    for (int k = 0; k < M; k++) o[k] = o0[k] = 0.1 * (k + 1);                          \
    APPROX_EQ(f(x, o, n), ref(x, o0, n), 1e-14);                                       \
    for (int k = 0; k < M; k++) o[k] = o0[k] = 0.1 * (k + 1);                          \
    __enzyme_autodiff((void *)ref, enzyme_dup, x, want, enzyme_dup, o0, d_o0,          \
                      enzyme_const, n);                                                \
    __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_dup, o, d_o, enzyme_const,  \
                      n);                                                              \
    for (int k = 0; k < M; k++) {                                                      \
      APPROX_EQ(dx[k], want[k], 1e-12);                                                \
      APPROX_EQ(d_o[k], d_o0[k], 1e-12);                                               \
      APPROX_EQ(o[k], o0[k], 1e-14); /* the state after the gradient */                \
    }                                                                                  \
    for (int k = 0; k < M; k++) o[k] = o0[k] = 0.1 * (k + 1);                          \
    APPROX_EQ(__enzyme_fwddiff((void *)f, enzyme_dup, x, v, enzyme_dup, o, t,          \
                               enzyme_const, n),                                       \
              __enzyme_fwddiff((void *)ref, enzyme_dup, x, v, enzyme_dup, o0, t0,      \
                               enzyme_const, n),                                       \
              1e-12);                                                                  \
    for (int k = 0; k < M; k++) APPROX_EQ(t[k], t0[k], 1e-12);                         \
  } while (0)

int main(void) {
  long steps[] = {0, 1, 2, 7, 20};
  for (unsigned a = 0; a < sizeof(steps) / sizeof(steps[0]); a++) {
    CHECK(binomial, plain, steps[a]);
    CHECK(periodic, plain, steps[a]);
    CHECK(store_all, plain, steps[a]);
    CHECK(dflt, plain, steps[a]);
    CHECK(revolve_int, plain_int, steps[a]);
  }
  return failures;
}
