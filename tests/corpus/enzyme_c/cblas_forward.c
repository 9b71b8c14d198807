// Forward mode differentiates CBLAS dot, GEMV and GEMM by name, as Enzyme does: the tangent is
// the routine called again on (tangent, primal) pairs, before the call itself, whatever the
// routine's body does (here each call is also written to a log, which the body's own
// derivative could not do: it stored the primal pointers beside their shadows and was refused).
#include "test_utils.h"

double __enzyme_fwddiff(void *, ...);

enum { COL_MAJOR = 102, NO_TRANS = 111, TRANS = 112 };

// The calls made, in order: the routine and its pointer arguments.
static struct {
  char op;
  const double *p[3];
} calls[64];
static int ncalls;

static void record(char op, const double *a, const double *b, const double *c) {
  if (ncalls < 64) {
    calls[ncalls].op = op;
    calls[ncalls].p[0] = a;
    calls[ncalls].p[1] = b;
    calls[ncalls].p[2] = c;
  }
  ncalls++;
}

static void check_call(int k, char op, const double *a, const double *b, const double *c) {
  if (k >= ncalls || calls[k].op != op || calls[k].p[0] != a || calls[k].p[1] != b ||
      calls[k].p[2] != c) {
    fprintf(stderr, "call %d is not the expected %c\n", k, op);
    failures++;
  }
}

__attribute__((noinline)) double cblas_ddot(int n, const double *x, int incx, const double *y,
                                            int incy) {
  record('d', x, y, 0);
  double s = 0;
  for (int i = 0; i < n; i++) s += x[i * incx] * y[i * incy];
  return s;
}

// Column-major only.
__attribute__((noinline)) void cblas_dgemv(int layout, int trans, int m, int n, double alpha,
                                           const double *a, int lda, const double *x, int incx,
                                           double beta, double *y, int incy) {
  record('v', a, x, y);
  if (layout != COL_MAJOR) exit(2);
  int t = trans == TRANS, leny = t ? n : m;
  for (int i = 0; i < leny; i++) y[i * incy] *= beta;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double aij = alpha * a[i + j * lda];
      if (t) y[j * incy] += aij * x[i * incx];
      else y[i * incy] += aij * x[j * incx];
    }
}

// Column-major, op(A) = A only.
__attribute__((noinline)) void cblas_dgemm(int layout, int ta, int tb, int m, int n, int k,
                                           double alpha, const double *a, int lda,
                                           const double *b, int ldb, double beta, double *c,
                                           int ldc) {
  record('m', a, b, c);
  if (layout != COL_MAJOR || ta != NO_TRANS || tb != NO_TRANS) exit(2);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int l = 0; l < k; l++) s += a[i + l * lda] * b[l + j * ldb];
      c[i + j * ldc] = alpha * s + beta * c[i + j * ldc];
    }
}

double dot3(const double *x, const double *y) { return cblas_ddot(3, x, 1, y, 1); }

void gemv23(int trans, double alpha, const double *a, const double *x, double *y) {
  cblas_dgemv(COL_MAJOR, trans, 2, 3, alpha, a, 2, x, 1, 0.5, y, 1);
}

void gemm22(const double *a, const double *b, double *c) {
  cblas_dgemm(COL_MAJOR, NO_TRANS, NO_TRANS, 2, 2, 2, 2.0, a, 2, b, 2, -1.0, c, 2);
}

int main(void) {
  double x[3] = {1, 2, 3}, y[3] = {-1, 0.5, 2}, dx[3] = {0.1, -0.2, 0.3}, dy[3] = {1, 1, -1};
  ncalls = 0;
  double t = __enzyme_fwddiff((void *)dot3, enzyme_dup, x, dx, enzyme_dup, y, dy);
  APPROX_EQ(t, (0.1 * -1 - 0.2 * 0.5 + 0.3 * 2) + (1 + 2 - 3), 1e-14);
  if (ncalls != 3) failures++;
  check_call(0, 'd', dx, y, 0);
  check_call(1, 'd', x, dy, 0);
  check_call(2, 'd', x, y, 0);
  ncalls = 0;
  t = __enzyme_fwddiff((void *)dot3, enzyme_const, x, enzyme_dup, y, dy);
  APPROX_EQ(t, 1 + 2 - 3, 1e-14);
  if (ncalls != 2) failures++;
  check_call(0, 'd', x, dy, 0);

  // y = alpha op(A) x + 0.5 y, A 2 x 3 (column-major): tangent along (alpha, A, x, y).
  double a[6] = {1, -2, 0.5, 3, 2, -1}, da[6] = {0.3, 0.1, -0.4, 0.2, 0.5, -0.6};
  for (int trans = NO_TRANS; trans <= TRANS; trans++) {
    int rows = trans == TRANS ? 3 : 2, cols = trans == TRANS ? 2 : 3;
    double v[3] = {0.5, -1, 2}, dv[3] = {1, 0.25, -0.5}, w[3] = {1, 2, 3}, dw[3] = {-1, 1, 0.5};
    double w0[3] = {1, 2, 3}, dw0[3] = {-1, 1, 0.5};
    double alpha = 1.5, dalpha = -0.5;
    ncalls = 0;
    __enzyme_fwddiff((void *)gemv23, enzyme_const, trans, alpha, dalpha, enzyme_dup, a, da,
                     enzyme_dup, v, dv, enzyme_dup, w, dw);
    for (int r = 0; r < rows; r++) {
      double av = 0, dav = 0, adv = 0;
      for (int c = 0; c < cols; c++) {
        int at = trans == TRANS ? c + r * 2 : r + c * 2;  // op(A)(r, c)
        av += a[at] * v[c];
        dav += da[at] * v[c];
        adv += a[at] * dv[c];
      }
      APPROX_EQ(w[r], alpha * av + 0.5 * w0[r], 1e-14);
      APPROX_EQ(dw[r], dalpha * av + alpha * (dav + adv) + 0.5 * dw0[r], 1e-14);
    }
    // Enzyme's order: the x term, the A term, the alpha term, then the call.
    if (ncalls != 4) failures++;
    check_call(0, 'v', a, dv, dw);
    check_call(1, 'v', da, v, dw);
    check_call(2, 'v', a, v, dw);
    check_call(3, 'v', a, v, w);
  }

  // C = 2 A B - C: tangent along A only.
  double p[4] = {1, 2, 3, 4}, q[4] = {-1, 0.5, 2, 1}, dp[4] = {0.5, -1, 0.25, 2};
  double c[4] = {1, 1, 1, 1}, dc[4] = {0.5, 0.5, 0.5, 0.5};
  ncalls = 0;
  __enzyme_fwddiff((void *)gemm22, enzyme_dup, p, dp, enzyme_const, q, enzyme_dup, c, dc);
  for (int j = 0; j < 2; j++)
    for (int i = 0; i < 2; i++) {
      double s = 0, ds = 0;
      for (int l = 0; l < 2; l++) {
        s += p[i + l * 2] * q[l + j * 2];
        ds += dp[i + l * 2] * q[l + j * 2];
      }
      APPROX_EQ(c[i + j * 2], 2 * s - 1, 1e-14);
      APPROX_EQ(dc[i + j * 2], 2 * ds - 0.5, 1e-14);
    }
  if (ncalls != 2) failures++;
  check_call(0, 'm', dp, q, dc);
  check_call(1, 'm', p, q, c);
  return failures;
}
