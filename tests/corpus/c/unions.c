/* Unions: type punning, tagged unions, anonymous unions inside structs. */
#include <stdint.h>

union bits { double d; uint64_t u; unsigned char b[8]; };

uint64_t double_bits(double x) { union bits v; v.d = x; return v.u; }
double from_bits(uint64_t u) { union bits v; v.u = u; return v.d; }
int low_byte(double x) { union bits v = {.d = x}; return v.b[0]; }

typedef enum { NUM, PAIR, NAME } kind;
typedef struct {
    kind k;
    union {
        double num;
        struct { float a, b; } pair;
        const char *name;
    };
} value;

double value_weight(value v) {
    switch (v.k) {
    case NUM: return v.num;
    case PAIR: return (double)v.pair.a * v.pair.b;
    case NAME: return v.name[0];
    }
    return 0.0;
}

value make_pair(float a, float b) { value v; v.k = PAIR; v.pair.a = a; v.pair.b = b; return v; }

float fast_inv_sqrt(float x) {
    union { float f; int32_t i; } u = {x};
    u.i = 0x5f3759df - (u.i >> 1);
    return u.f * (1.5f - 0.5f * x * u.f * u.f);
}
