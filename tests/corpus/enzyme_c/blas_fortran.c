// A program that carries its own BLAS routines (Fortran interface: column-major, every
// argument by pointer, the operation chosen by a letter): pyzyme differentiates their bodies.
// The case-insensitive letter tests become switches with several cases sending control to
// the same block; reverse mode must record which edge it came by (one phi entry per edge).
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

// LAPACK's LSAME: the letter at a, upper-cased, is b.
static int letter_is(const char *a, char b) {
  int c = *(const unsigned char *)a;
  if (c >= 'a' && c <= 'z') c -= 'a' - 'A';
  return c == b;
}

// y := alpha op(A) x + beta y, A m x n with leading dimension lda; op(A) = A ('N') or its
// transpose ('T' or 'C').
__attribute__((noinline)) void dgemv_(const char *trans, const int *m, const int *n,
                                      const double *alpha, const double *a, const int *lda,
                                      const double *x, const int *incx, const double *beta,
                                      double *y, const int *incy) {
  int t = letter_is(trans, 'T') || letter_is(trans, 'C');
  if (!t && !letter_is(trans, 'N')) {
    fprintf(stderr, "dgemv_: TRANS is '%c'\n", *trans);
    exit(2);
  }
  int leny = t ? *n : *m;
  for (int i = 0; i < leny; i++) y[i * *incy] = *beta == 0 ? 0 : *beta * y[i * *incy];
  for (int j = 0; j < *n; j++)
    for (int i = 0; i < *m; i++) {
      double aij = *alpha * a[i + j * *lda];
      if (t) y[j * *incy] += aij * x[i * *incx];
      else y[i * *incy] += aij * x[j * *incx];
    }
}

__attribute__((noinline)) double ddot_(const int *n, const double *x, const int *incx,
                                       const double *y, const int *incy) {
  double s = 0;
  for (int i = 0; i < *n; i++) s += x[i * *incx] * y[i * *incy];
  return s;
}

// |op(A) x|^2 through y.
double norm2_of_product(const char *trans, const double *a, const double *x, double *y, int m,
                        int n) {
  double one = 1, zero = 0;
  int inc = 1, lda = m, len = letter_is(trans, 'N') ? m : n;
  dgemv_(trans, &m, &n, &one, a, &lda, x, &inc, &zero, y, &inc);
  return ddot_(&len, y, &inc, y, &inc);
}

int main(void) {
  enum { M = 3, N = 2 };
  const double a[M * N] = {0.5, -1.25, 2.0, 0.75, 1.5, -0.5};  // column-major
  const char *letters = "NnTtCc";
  for (int k = 0; k < 6; k++) {
    const char *trans = &letters[k];
    int t = k >= 2, rows = t ? N : M, cols = t ? M : N;  // op(A) is rows x cols
    double x[M] = {0.3, -0.7, 1.1}, y[M] = {0}, da[M * N] = {0}, dx[M] = {0}, dy[M] = {0};
    double f = norm2_of_product(trans, a, x, y, M, N);
    __enzyme_autodiff((void *)norm2_of_product, enzyme_const, trans, enzyme_dup, a, da,
                      enzyme_dup, x, dx, enzyme_dup, y, dy, M, N);
    // y = op(A) x: d/dx = 2 op(A)^T y; d/dA(i,j) = 2 y_i x_j (N) or 2 x_i y_j (T).
    double fy = 0;
    for (int r = 0; r < rows; r++) fy += y[r] * y[r];
    APPROX_EQ(fy, f, 1e-12);
    for (int c = 0; c < cols; c++) {
      double g = 0;
      for (int r = 0; r < rows; r++) g += 2 * (t ? a[c + r * M] : a[r + c * M]) * y[r];
      APPROX_EQ(dx[c], g, 1e-12);
    }
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++)
        APPROX_EQ(da[i + j * M], t ? 2 * x[i] * y[j] : 2 * y[i] * x[j], 1e-12);
    // Forward mode: the tangent along (dA, dx) is 2 y . (op(dA) x + op(A) dx).
    double ta[M * N] = {0.1, 0.2, -0.3, 0.4, -0.5, 0.6}, tx[M] = {1, -2, 0.5}, ty[M] = {0};
    double tf = __enzyme_fwddiff((void *)norm2_of_product, enzyme_const, trans, enzyme_dup, a,
                                 ta, enzyme_dup, x, tx, enzyme_dup, y, ty, M, N);
    double want = 0;
    for (int r = 0; r < rows; r++) {
      double d = 0;
      for (int c = 0; c < cols; c++) {
        int at = t ? c + r * M : r + c * M;
        d += ta[at] * x[c] + a[at] * tx[c];
      }
      want += 2 * y[r] * d;
    }
    APPROX_EQ(tf, want, 1e-12);
  }
  return failures;
}
