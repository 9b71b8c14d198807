// A custom allocator declared to Enzyme with __enzyme_allocation_like: memory from a pool,
// its size in argument 0, freed by pool_free(argument 1 of the allocator, the memory). The
// shadow of each block is another block of the pool, zeroed, and freed with it, once the
// derivative is done with both.
#include "test_utils.h"

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

static _Alignas(16) char pool[4096];
static int used = 0;
int live = 0;

void *pool_alloc(int bytes, int *counter) {
  void *p = pool + used;
  used += (bytes + 15) & ~15;
  (*counter)++;
  return p;
}

// The block goes back to the pool, which may hand it out again: what it held is gone.
void pool_free(int *counter, void *p) {
  for (int i = 0; i < 3; i++) ((double *)p)[i] = NAN;
  (*counter)--;
}

void *__enzyme_allocation_like[4] = {(void *)pool_alloc, (void *)0, (void *)"1,-1",
                                     (void *)pool_free};

// x sin(x^2), through a block of the pool
double f(double x) {
  double *t = pool_alloc(3 * sizeof(double), &live);
  t[0] = x;
  t[1] = x * x;
  t[2] = sin(t[1]);
  double r = t[0] * t[2];
  pool_free(&live, t);
  return r;
}

int main(void) {
  double x = 0.8, want = sin(x * x) + 2 * x * x * cos(x * x);
  APPROX_EQ(__enzyme_autodiff((void *)f, x), want, 1e-12);
  APPROX_EQ(live, 0, 0);  // each block (and each shadow) was freed
  APPROX_EQ(__enzyme_fwddiff((void *)f, x, 1.0), want, 1e-12);
  APPROX_EQ(live, 0, 0);
  return failures;
}
