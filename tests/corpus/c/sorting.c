/* Sorting and searching: quicksort, insertion sort, binary search, selects, swaps. */
#include <stddef.h>

static void swap(double *a, double *b) { double t = *a; *a = *b; *b = t; }

static size_t partition(double *x, size_t lo, size_t hi) {
    double pivot = x[hi];
    size_t i = lo;
    for (size_t j = lo; j < hi; j++)
        if (x[j] < pivot) swap(&x[i++], &x[j]);
    swap(&x[i], &x[hi]);
    return i;
}

void quicksort(double *x, size_t lo, size_t hi) {
    while (lo < hi) {
        size_t p = partition(x, lo, hi);
        if (p > lo) quicksort(x, lo, p - 1);
        lo = p + 1;
    }
}

void insertion_sort(int *x, int n) {
    for (int i = 1; i < n; i++) {
        int v = x[i], j = i - 1;
        while (j >= 0 && x[j] > v) { x[j + 1] = x[j]; j--; }
        x[j + 1] = v;
    }
}

long lower_bound(const double *x, long n, double v) {
    long lo = 0, hi = n;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        if (x[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
}

double median3(double a, double b, double c) {
    double mx = a > b ? a : b, mn = a < b ? a : b;
    return c > mx ? mx : c < mn ? mn : c;
}

int argmax(const double *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

void minmax(const float *x, int n, float *lo, float *hi) {
    float a = x[0], b = x[0];
    for (int i = 1; i < n; i++) { a = x[i] < a ? x[i] : a; b = x[i] > b ? x[i] : b; }
    *lo = a; *hi = b;
}
