// A multiply-add written as inline assembly, as Eigen's AVX pmadd is for clang (to pin the
// instruction to vfmadd231pd): pyzyme reads it as the fused multiply-add it is (llvm.fma);
// inline assembly has no derivative otherwise.
// flags: -mavx -mfma -fno-exceptions
#include <cmath>
#include <cstdio>

typedef double v4d __attribute__((vector_size(32)));

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
extern int enzyme_dup, enzyme_const;

static inline v4d pmadd(v4d a, v4d b, v4d c) {
  v4d res = c;
  __asm__("vfmadd231pd %[a], %[b], %[c]" : [c] "+x"(res) : [a] "x"(a), [b] "x"(b));
  return res;
}

// sum over lanes of x[i] * x[i + 4] + x[i + 8] * 2, four lanes at a time.
double f(const double *x) {
  v4d a, b, c;
  for (int k = 0; k < 4; k++) a[k] = x[k], b[k] = x[k + 4], c[k] = x[k + 8];
  v4d two = {2, 2, 2, 2};
  v4d r = pmadd(a, b, pmadd(c, two, v4d{0, 0, 0, 0}));
  return r[0] + r[1] + r[2] + r[3];
}

int main() {
  double x[12], dx[12] = {0}, v[12], want = 0;
  int failures = 0;
  for (int i = 0; i < 12; i++) x[i] = 0.5 + 0.25 * i, v[i] = 1.0 / (i + 1);
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx);
  for (int i = 0; i < 12; i++) {
    double grad = i < 4 ? x[i + 4] : i < 8 ? x[i - 4] : 2.0;
    want += grad * v[i];
    if (!(std::fabs(dx[i] - grad) < 1e-12)) {
      std::fprintf(stderr, "dx[%d] = %g, expected %g\n", i, dx[i], grad);
      failures++;
    }
  }
  double got = __enzyme_fwddiff((void *)f, enzyme_dup, x, v);
  if (!(std::fabs(got - want) < 1e-12)) {
    std::fprintf(stderr, "forward %g, expected %g\n", got, want);
    failures++;
  }
  return failures;
}
