// A calloc'd product C = A B, then the sum of squares of C: gradient in A and B.
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);

double frob(const double *A, const double *B, int n) {
  double *C = (double *)calloc(n * n, sizeof(double));
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      for (int k = 0; k < n; k++) C[i * n + j] += A[i * n + k] * B[k * n + j];
  double s = 0;
  for (int i = 0; i < n * n; i++) s += C[i] * C[i];
  free(C);
  return s;
}

int main(void) {
  enum { N = 3 };
  double A[N * N], B[N * N], dA[N * N] = {0}, dB[N * N] = {0}, C[N * N] = {0};
  for (int i = 0; i < N * N; i++) A[i] = 0.1 * i - 0.3, B[i] = 0.05 * i * i - 0.2;
  __enzyme_autodiff((void *)frob, A, dA, B, dB, N);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      for (int k = 0; k < N; k++) C[i * N + j] += A[i * N + k] * B[k * N + j];
  // d/dA = 2 C B^T, d/dB = 2 A^T C
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double ga = 0, gb = 0;
      for (int k = 0; k < N; k++) {
        ga += 2 * C[i * N + k] * B[j * N + k];
        gb += 2 * A[k * N + i] * C[k * N + j];
      }
      APPROX_EQ(dA[i * N + j], ga, 1e-12);
      APPROX_EQ(dB[i * N + j], gb, 1e-12);
    }
  return failures;
}
