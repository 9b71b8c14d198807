// Calls with active arguments that may throw, made where a local object has a destructor to
// run if they do: clang makes them invokes, whose landing pads only clean up and resume. The
// callees are recursive (a destructor runs after the recursive call), so they stay calls at
// every level; nth returns a pointer into active memory.
#include <cmath>
#include <cstdio>
#include <stdexcept>

extern "C" void __enzyme_autodiff(void *, ...);
extern "C" void __enzyme_fwddiff(void *, ...);
extern int enzyme_dup, enzyme_const;
static int failures = 0;
#define APPROX_EQ(a, b)                                                                     \
  do {                                                                                      \
    if (std::fabs((a) - (b)) > 1e-12 * (1 + std::fabs(b))) {                                \
      std::fprintf(stderr, "line %d: %.17g != %.17g\n", __LINE__, (double)(a), (double)(b)); \
      failures++;                                                                           \
    }                                                                                       \
  } while (0)

// Counts the frames it leaves, returning or unwinding.
struct Count {
  long *n;
  ~Count() { ++*n; }
};

// &a[i], found by walking the array; past its end: out_of_range.
double *nth(double *a, long n, long i, long *steps) {
  Count c{steps};
  if (i >= n) throw std::out_of_range("nth: past the end");
  return i == 0 ? a : nth(a + 1, n - 1, i - 1, steps);
}

// dst[k] += src[k]^2 for k < n.
void add_squares(double *dst, const double *src, long n, long *steps) {
  Count c{steps};
  if (n < 0) throw std::invalid_argument("add_squares: negative length");
  if (n == 0) return;
  dst[0] += src[0] * src[0];
  add_squares(dst + 1, src + 1, n - 1, steps);
}

// a[2] = a[0] a[2], b[k] += a[k]^2 (k < 2)
void update(double *a, double *b, long *steps) {
  Count c{steps};
  double *x = nth(a, 3, 0, steps), *y = nth(a, 3, 2, steps);
  *y = *x * *y;
  add_squares(b, a, 2, steps);
}

int main() {
  long steps = 0;
  double a[3] = {1.5, -2.0, 0.5}, da[3] = {0, 0, 1}, b[2] = {0, 0}, db[2] = {1, 1};
  __enzyme_autodiff((void *)update, enzyme_dup, a, da, enzyme_dup, b, db, enzyme_const,
                    &steps);
  APPROX_EQ(a[2], 1.5 * 0.5);
  APPROX_EQ(da[0], 2 * 1.5 + 0.5);
  APPROX_EQ(da[1], 2 * -2.0);
  APPROX_EQ(da[2], 1.5);
  APPROX_EQ(db[0], 1.0);
  if (steps <= 0) failures++;

  double f[3] = {1.5, -2.0, 0.5}, tf[3] = {1, 0.25, 2}, g[2] = {0, 0}, tg[2] = {0, 0};
  __enzyme_fwddiff((void *)update, enzyme_dup, f, tf, enzyme_dup, g, tg, enzyme_const, &steps);
  APPROX_EQ(f[2], 1.5 * 0.5);
  APPROX_EQ(tf[2], 1 * 0.5 + 1.5 * 2);
  APPROX_EQ(tg[0], 2 * 1.5 * 1);
  APPROX_EQ(tg[1], 2 * -2.0 * 0.25);
  return failures;
}
