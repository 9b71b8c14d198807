// In-place insertion sort, then a weighted sum: the gradient follows the permutation.
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);

double sorted_weighted(double *a, int n) {
  for (int i = 1; i < n; i++) {
    double key = a[i];
    int j = i - 1;
    while (j >= 0 && a[j] > key) {
      a[j + 1] = a[j];
      j--;
    }
    a[j + 1] = key;
  }
  double s = 0;
  for (int i = 0; i < n; i++) s += (i + 1) * a[i] * a[i];
  return s;
}

int main(void) {
  double a[5] = {3.0, -1.0, 2.5, 0.5, 4.0}, da[5] = {0};
  double orig[5] = {3.0, -1.0, 2.5, 0.5, 4.0};
  __enzyme_autodiff((void *)sorted_weighted, a, da, 5);
  // Sorted order: -1 (rank 1), 0.5 (2), 2.5 (3), 3 (4), 4 (5).
  int rank[5] = {4, 1, 3, 2, 5};
  for (int i = 0; i < 5; i++) APPROX_EQ(da[i], 2 * rank[i] * orig[i], 1e-12);
  return failures;
}
