// Reverse over reverse over reverse (and once more): each round differentiates the code the
// previous one generated, whose tape keeps loop starts that are all 0 and defers the release
// of the workspace it allocates (each grown as a copy in the next round). The 2nd, 3rd and
// 4th derivatives of a series with a heap workspace are those of exp(a x) sin(x).
#include <stdint.h>
#include <stdlib.h>
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
uint64_t __enzyme_iter(uint64_t, uint64_t);

#define TERMS 24

// sum_k (x^k / k!) (a^k + i^k terms) as exp(a x) sin(x) = Im exp((a + i) x), by its series.
double series(double x) {
  uint64_t n = __enzyme_iter(TERMS, 1);
  double *p = malloc(sizeof(double) * (TERMS + 8));
  double re = 1, im = 0, sum = 0;
  p[0] = 1;
  for (uint64_t k = 1; k < n; k++) {
    double r = re * 0.5 - im, i = re + im * 0.5;  // times (a + i), a = 0.5
    re = r;
    im = i;
    p[k] = p[k - 1] * x / (double)k;
    sum += p[k] * im;
  }
  free(p);
  return sum;
}

double d1(double x) { return __enzyme_autodiff((void *)series, x); }
double d2(double x) { return __enzyme_autodiff((void *)d1, x); }
double d3(double x) { return __enzyme_autodiff((void *)d2, x); }
double d4(double x) { return __enzyme_autodiff((void *)d3, x); }

int main(void) {
  double x = 0.8, a = 0.5;
  // d^k/dx^k exp(a x) sin x = |a + i|^k exp(a x) sin(x + k atan2(1, a))
  double r = sqrt(a * a + 1), th = atan2(1.0, a), e = exp(a * x);
  APPROX_EQ(series(x), e * sin(x), 1e-12);
  APPROX_EQ(d1(x), r * e * sin(x + th), 1e-10);
  APPROX_EQ(d2(x), r * r * e * sin(x + 2 * th), 1e-9);
  APPROX_EQ(d3(x), r * r * r * e * sin(x + 3 * th), 1e-8);
  APPROX_EQ(d4(x), r * r * r * r * e * sin(x + 4 * th), 1e-7);
  return failures;
}
