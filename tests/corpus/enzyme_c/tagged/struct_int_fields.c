// Reverse mode through structs whose integer fields are copied from active memory: a span
// {lo, hi, data} split in halves into fresh structs, recursively. The copied integers are
// integers (clang's type tags say so, from -O1 on), not float bits to be differentiated.
#include "../test_utils.h"

double __enzyme_autodiff(void *, ...);

typedef struct {
  long long lo, hi;
  double *data;
} span_t;

double weighted_sum(span_t *s) {
  if (s->hi - s->lo <= 1) return s->data[s->lo] * s->data[s->lo] * (double)(s->lo + 1);
  span_t *left = malloc(sizeof(span_t)), *right = malloc(sizeof(span_t));
  long long mid = s->lo + (s->hi - s->lo) / 2;
  left->lo = s->lo;
  left->hi = mid;
  left->data = s->data;
  right->lo = mid;
  right->hi = s->hi;
  right->data = s->data;
  double r = weighted_sum(left) + weighted_sum(right);
  free(left);
  free(right);
  return r;
}

int main(void) {
  double x[7] = {0.5, -1.0, 2.0, 0.25, 3.0, -0.75, 1.5}, dx[7] = {0};
  span_t s = {0, 7, x}, ds = {0, 0, dx};
  __enzyme_autodiff((void *)weighted_sum, &s, &ds);
  for (int i = 0; i < 7; i++) APPROX_EQ(dx[i], 2 * x[i] * (i + 1), 1e-12);
  return failures;
}
