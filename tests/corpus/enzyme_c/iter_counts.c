// __enzyme_iter(n, step) is n in the program and n + k * step in its k-th derivative, so a
// series truncated at __enzyme_iter(8, 1) terms keeps degree 8 however often it is
// differentiated: each derivative of the exp series is the series itself, exactly. Without the
// extra terms the first derivative would miss x^8/8! (6e-4 at x = 1.5), the second x^7/7! too.
// The series' loop runs a count known only at run time, so reverse over reverse
// differentiates the first derivative's growing caches.
#include "test_utils.h"

unsigned long long __enzyme_iter(unsigned long long, unsigned long long);
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double exp_series(double x) {
  unsigned long long n = __enzyme_iter(8, 1);
  double term = 1, sum = 1;
  for (unsigned long long k = 1; k <= n; k++) {
    term *= x / k;
    sum += term;
  }
  return sum;
}

double d_exp(double x) { return __enzyme_autodiff((void *)exp_series, x); }
double fd_exp(double x) { return __enzyme_fwddiff((void *)exp_series, x, 1.0); }
double dd_exp(double x) { return __enzyme_autodiff((void *)d_exp, x); }
double fdd_exp(double x) { return __enzyme_fwddiff((void *)d_exp, x, 1.0); }

int main(void) {
  for (double x = -1.0; x <= 1.5; x += 0.5) {
    double p8 = 1, term = 1;  // the series to degree 8
    for (int k = 1; k <= 8; k++) {
      term *= x / k;
      p8 += term;
    }
    APPROX_EQ(exp_series(x), p8, 1e-14);
    APPROX_EQ(d_exp(x), p8, 1e-13);
    APPROX_EQ(fd_exp(x), p8, 1e-13);
    APPROX_EQ(dd_exp(x), p8, 1e-13);
    APPROX_EQ(fdd_exp(x), p8, 1e-13);
  }
  return failures;
}
