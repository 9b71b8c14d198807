// Copies of a struct holding integers and a pointer to floats (a window onto an array): the
// copy moves the pointer, not the floats it points to, so only the shadow pointer follows it.
#include "test_utils.h"
#include <string.h>

typedef struct {
  int start, end;
  double *data;
} Window;

void __enzyme_autodiff(void *, ...);

__attribute__((noinline)) double sum(const Window *w) {
  double s = 0;
  for (int i = w->start; i < w->end; i++) s += w->data[i] * w->data[i];
  return s;
}

double halves(Window *w) {
  Window *lo = malloc(sizeof(Window)), *hi = malloc(sizeof(Window));
  *lo = *w;  // struct assignment: a memcpy of ints and a pointer
  memcpy(hi, w, sizeof(Window));
  lo->end = hi->start = (w->start + w->end) / 2;
  double r = sum(lo) + 2 * sum(hi);
  free(lo);
  free(hi);
  return r;
}

int main(void) {
  double data[6] = {1, 2, 3, 4, 5, 6}, ddata[6] = {0};
  Window w = {0, 6, data}, dw = {0, 6, ddata};
  __enzyme_autodiff((void *)halves, &w, &dw);
  for (int i = 0; i < 6; i++) APPROX_EQ(ddata[i], (i < 3 ? 2 : 4) * data[i], 1e-14);
  return failures;
}
