/* Arrays: 1-D kernels, 2-D row-major matmul, stencils, VLAs (dynamic alloca). */
#include <stddef.h>

void axpy(size_t n, double a, const double *restrict x, double *restrict y) {
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

double dot(size_t n, const double *x, const double *y) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

void matmul(int n, int m, int k, const double *A, const double *B, double *C) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double s = 0.0;
            for (int l = 0; l < k; l++) s += A[i * k + l] * B[l * m + j];
            C[i * m + j] = s;
        }
}

void diffusion_step(int n, const double *u, double *out, double dt) {
    out[0] = u[0];
    out[n - 1] = u[n - 1];
    for (int i = 1; i < n - 1; i++) out[i] = u[i] + dt * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
}

double fixed_2d(double a[4][4]) {
    double tr = 0.0;
    for (int i = 0; i < 4; i++) tr += a[i][i] * a[i][3 - i];
    return tr;
}

double vla_sum(int n, const double *x) {
    double tmp[n];
    for (int i = 0; i < n; i++) tmp[i] = x[i] * x[i];
    double s = 0.0;
    for (int i = n - 1; i >= 0; i--) s += tmp[i];
    return s;
}

void prefix_sum(int n, const float *x, float *out) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) {
        acc += x[i];
        out[i] = acc;
    }
}

static const double weights[5] = {0.1, 0.2, 0.4, 0.2, 0.1};

void convolve5(int n, const double *x, double *y) {
    for (int i = 2; i < n - 2; i++) {
        double s = 0.0;
        for (int k = 0; k < 5; k++) s += weights[k] * x[i + k - 2];
        y[i] = s;
    }
}

void transpose(int n, int m, const double *a, double *b) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) b[j * n + i] = a[i * m + j];
}
