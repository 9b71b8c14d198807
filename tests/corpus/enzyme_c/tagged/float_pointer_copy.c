// A struct's float array copied whole (memcpy of a length known at run time) into a fresh
// block that another struct keeps, as Eigen's tensor evaluator copies a kernel tensor's data:
// nothing in this function reads the copy as floats, but clang's type tags name the data
// pointer a float * ("p1 float"), so the bytes copied are floats, whose adjoints go back
// (from -O1 on: clang writes no tags at -O0).
#include <string.h>

#include "../test_utils.h"

void __enzyme_autodiff(void *, ...);

struct tensor {
  float *data;
  long n;
};

struct eval {
  long n;
  float *copy;
};

// Recursive, so that it stays a call: what it reads the copy as is not seen by f.
float dot_eval(const struct eval *e, const float *x, long i) {
  if (i == e->n) return 0;
  float rest = dot_eval(e, x, i + 1);
  return e->copy[i] * x[i] * (float)(i + 1) + rest;
}

float f(const struct tensor *k, const float *x) {
  struct eval e;
  float *copy = 0;
  if (k->n) {
    copy = malloc(k->n * sizeof(float));
    memcpy(copy, k->data, k->n * sizeof(float));
  }
  e.n = k->n;
  e.copy = copy;  // null or the block: merged before it is stored
  float r = dot_eval(&e, x, 0);
  free(e.copy);
  return r;
}

int main(void) {
  float data[5] = {1, -2, 0.5f, 3, 0.25f}, ddata[5] = {0}, x[5] = {2, 1, -1, 0.5f, 4};
  float dx[5] = {0};
  struct tensor k = {data, 5}, dk = {ddata, 5};
  __enzyme_autodiff((void *)f, enzyme_dup, &k, &dk, enzyme_dup, x, dx);
  for (int i = 0; i < 5; i++) {
    APPROX_EQ(ddata[i], x[i] * (i + 1), 1e-6);
    APPROX_EQ(dx[i], data[i] * (i + 1), 1e-6);
  }
  return failures;
}
