/* A numeric kernel: RK4 integration of a damped oscillator and a Lotka-Volterra system. */
#include <math.h>

typedef struct { double k, c, m; } params;
typedef void (*rhs_fn)(double t, const double *y, double *dy, const void *p);

static void oscillator(double t, const double *y, double *dy, const void *vp) {
    const params *p = vp;
    dy[0] = y[1];
    dy[1] = (-p->k * y[0] - p->c * y[1] + sin(t)) / p->m;
}

static void lotka(double t, const double *y, double *dy, const void *vp) {
    (void)t;
    const double *a = vp;
    dy[0] = a[0] * y[0] - a[1] * y[0] * y[1];
    dy[1] = a[2] * y[0] * y[1] - a[3] * y[1];
}

void rk4(rhs_fn f, const void *p, int n, double *y, double t0, double h, int steps) {
    double k1[8], k2[8], k3[8], k4[8], tmp[8];
    double t = t0;
    for (int s = 0; s < steps; s++) {
        f(t, y, k1, p);
        for (int i = 0; i < n; i++) tmp[i] = y[i] + 0.5 * h * k1[i];
        f(t + 0.5 * h, tmp, k2, p);
        for (int i = 0; i < n; i++) tmp[i] = y[i] + 0.5 * h * k2[i];
        f(t + 0.5 * h, tmp, k3, p);
        for (int i = 0; i < n; i++) tmp[i] = y[i] + h * k3[i];
        f(t + h, tmp, k4, p);
        for (int i = 0; i < n; i++) y[i] += h / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]);
        t += h;
    }
}

double simulate_oscillator(double k, double c, double x0) {
    params p = {k, c, 1.0};
    double y[2] = {x0, 0.0};
    rk4(oscillator, &p, 2, y, 0.0, 0.01, 1000);
    return y[0];
}

double simulate_lotka(const double a[4], double prey, double pred) {
    double y[2] = {prey, pred};
    rk4(lotka, a, 2, y, 0.0, 0.001, 5000);
    return y[0] + y[1];
}
