/* C99 complex numbers: arithmetic (calls to __muldc3/__divdc3 at -O0), libm complex calls. */
#include <complex.h>

double complex cmul(double complex a, double complex b) { return a * b; }
double complex cdiv(double complex a, double complex b) { return a / b; }
float complex cmulf(float complex a, float complex b) { return a * b + 1.0f; }

double complex poly(double complex z) { return z * z * z - 2.0 * z + 1.0; }

double mandel_iter(double cr, double ci, int max_iter) {
    double complex c = cr + ci * I, z = 0;
    int i = 0;
    while (i < max_iter && creal(z) * creal(z) + cimag(z) * cimag(z) < 4.0) { z = z * z + c; i++; }
    return i;
}

double complex unit(double theta) { return cexp(I * theta); }
double magnitude(double complex z) { return cabs(z) + carg(z); }
double complex conj_sqrt(double complex z) { return csqrt(conj(z)); }

void dft(int n, const double complex *x, double complex *out) {
    for (int k = 0; k < n; k++) {
        double complex s = 0;
        for (int t = 0; t < n; t++) s += x[t] * cexp(-2.0 * I * 3.141592653589793 * t * k / n);
        out[k] = s;
    }
}
