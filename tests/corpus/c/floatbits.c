/* Floating-point types and conversions: half, float, double, long double, __float128,
   int<->fp conversions, NaN and infinity constants, unordered compares, frem. */
#include <math.h>
#include <stdint.h>
#include <string.h>

_Float16 half_mul(_Float16 a, _Float16 b) { return a * b + (_Float16)1.0; }
float from_half(_Float16 h) { return (float)h; }
double widen(float x) { return (double)x * 0.1; }
float narrow(double x) { return (float)x; }
long double to_long_double(double x) { return (long double)x / 3.0L; }
__float128 quad(__float128 a, double b) { return a * (__float128)b + 1; }

int64_t truncate(double x) { return (int64_t)x; }
uint32_t to_unsigned(float x) { return (uint32_t)x; }
double from_unsigned(uint64_t u) { return (double)u; }
float from_signed(int16_t s) { return (float)s; }

double constants(int i) {
    static const double c[] = {NAN, INFINITY, -INFINITY, -0.0, 0x1.fffffffffffffp+1023, 0x1p-1074, 1e-300};
    return c[i & 7];
}

int unordered(double a, double b) { return isunordered(a, b) + isless(a, b) + isgreaterequal(a, b) + (a != b); }
double fmodulo(double a, double b) { return __builtin_fmod(a, b); }
float fneg(float a) { return -a; }

uint64_t bits_of(double x) { uint64_t u; memcpy(&u, &x, sizeof u); return u; }

double clamp01(double x) { return x != x ? 0.0 : x < 0.0 ? 0.0 : x > 1.0 ? 1.0 : x; }

int fp_ops(double x) { return fpclassify(x) + isfinite(x) + isnormal(x); }
