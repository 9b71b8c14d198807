// pyzyme-corpus-flags: -ffast-math -fno-math-errno
/* Fast-math: fast flags on FP instructions, libm calls become llvm.* intrinsics,
   reassociated reductions, reciprocal approximations. */
#include <math.h>

double norm(const double *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s);
}

double softmax_denominator(const double *x, int n) {
    double m = x[0];
    for (int i = 1; i < n; i++) m = fmax(m, x[i]);
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp(x[i] - m);
    return m + log(s);
}

float poly_f(float x) { return powf(x, 3.0f) + 2.0f * sinf(x) * cosf(x) + 1.0f / x; }

double gmm_like(const double *x, const double *mu, const double *w, int k, int d) {
    double total = 0.0;
    for (int j = 0; j < k; j++) {
        double q = 0.0;
        for (int i = 0; i < d; i++) { double t = x[i] - mu[j * d + i]; q += t * t; }
        total += w[j] * exp(-0.5 * q);
    }
    return log(total);
}

double hypot3(double a, double b, double c) { return sqrt(a * a + b * b + c * c) + pow(a, 0.5) + exp2(b) + log10(fabs(c) + 1); }
