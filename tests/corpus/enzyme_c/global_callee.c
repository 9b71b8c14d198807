// Calls through a pointer to a library function that a writable global holds from the start:
// an allocator in a struct (its block needs a shadow) and a math function (its rule applies).
// The derivative calls them directly, after checking that the pointer still holds them.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);

struct allocator {
  int calls;
  void *(*alloc)(size_t);
} heap = {0, malloc};

double (*shape)(double) = sin;

__attribute__((noinline)) void *allocate(size_t bytes) {
  heap.calls++;
  return heap.alloc(bytes);
}

// sum_i sin(x_i) (i + 1), through a scratch block from the allocator
double weighted(const double *x, int n) {
  double *tmp = (double *)allocate(n * sizeof(double));
  for (int i = 0; i < n; i++) tmp[i] = shape(x[i]);
  double s = 0;
  for (int i = 0; i < n; i++) s += tmp[i] * (i + 1);
  free(tmp);
  return s;
}

int main(void) {
  double x[3] = {0.5, -1.5, 2.0}, dx[3] = {0, 0, 0};
  __enzyme_autodiff((void *)weighted, enzyme_dup, x, dx, enzyme_const, 3);
  for (int i = 0; i < 3; i++) APPROX_EQ(dx[i], cos(x[i]) * (i + 1), 1e-12);
  APPROX_EQ(weighted(x, 3), sin(0.5) + 2 * sin(-1.5) + 3 * sin(2.0), 1e-12);
  APPROX_EQ(heap.calls, 2, 0);
  return failures;
}
