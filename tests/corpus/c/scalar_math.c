/* Scalar math through libm: calls stay @sin, @exp, ... (errno) unless -fno-math-errno. */
#include <math.h>

double smooth_step(double x) {
    double t = fmin(fmax(x, 0.0), 1.0);
    return t * t * (3.0 - 2.0 * t);
}

double mix_libm(double x, double y) {
    double a = sin(x) * cos(y) + exp(-x * x) - log1p(fabs(y));
    double b = pow(fabs(x) + 1.0, 1.5) + sqrt(x * x + y * y) + atan2(y, x);
    double c = tanh(x) + hypot(x, y) + cbrt(y) + fma(x, y, 1.0);
    return a + b * c - floor(x) + ceil(y) + copysign(2.0, y) + round(x * 10.0) / 10.0;
}

float mix_libm_f(float x, float y) {
    return sinf(x) * expf(y) + sqrtf(fabsf(x * y)) + powf(x, 2.0f) + logf(1.0f + y * y);
}

long double extended(long double x) {
    return x * x + 1.0L / (1.0L + x * x) + sqrtl(fabsl(x));
}

double logistic(double x) { return 1.0 / (1.0 + exp(-x)); }

double softplus(double x) { return x > 30.0 ? x : log(1.0 + exp(x)); }

double gamma_ratio(double a, double b) { return exp(lgamma(a) - lgamma(b)) * erf(a - b); }

int classify(double x) {
    if (isnan(x)) return 0;
    if (isinf(x)) return 1;
    if (x == 0.0) return 2;
    return signbit(x) ? 3 : 4;
}

double remainder_sum(double x, double y) { return fmod(x, y) + remainder(x, y) + trunc(x / y); }
