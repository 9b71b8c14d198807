/* Loop shapes: counted, while, do-while, nested, early exit, continue, reductions. */
#include <stddef.h>

double taylor_exp(double x, int n) {
    double term = 1.0, sum = 1.0;
    for (int i = 1; i < n; i++) {
        term *= x / i;
        sum += term;
    }
    return sum;
}

int collatz_steps(unsigned long n) {
    int steps = 0;
    while (n != 1) {
        n = (n & 1) ? 3 * n + 1 : n / 2;
        steps++;
    }
    return steps;
}

double newton_sqrt(double a) {
    double x = a > 1.0 ? a : 1.0, prev;
    int it = 0;
    do {
        prev = x;
        x = 0.5 * (x + a / x);
        it++;
    } while (x != prev && it < 100);
    return x;
}

long find_first_negative(const double *x, long n) {
    for (long i = 0; i < n; i++)
        if (x[i] < 0.0) return i;
    return -1;
}

double sum_skip_nan(const double *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != x[i]) continue;
        s += x[i];
    }
    return s;
}

double triangle_sum(int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++)
            s += 1.0 / (1.0 + i + j);
    return s;
}

int nested_break(int n, int target) {
    int found = -1;
    for (int i = 0; i < n && found < 0; i++) {
        for (int j = 0; j < n; j++) {
            if (i * j == target) {
                found = i * n + j;
                break;
            }
        }
    }
    return found;
}

double horner(const double *c, int n, double x) {
    double y = 0.0;
    for (int i = n - 1; i >= 0; i--) y = y * x + c[i];
    return y;
}
