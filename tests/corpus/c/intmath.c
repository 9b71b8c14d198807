/* Integer arithmetic: division, shifts, overflow intrinsics, bit counting, i128, min/max. */
#include <stdint.h>
#include <stdbool.h>

int64_t divmod(int64_t a, int64_t b) { return a / b * 1000 + a % b; }
uint64_t udivmod(uint64_t a, uint64_t b) { return a / b + a % b; }
int32_t shifts(int32_t a, unsigned s) { return (a << (s & 31)) ^ (a >> 3) ^ (int32_t)((uint32_t)a >> 5); }

bool checked_mul(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }
bool checked_add(uint32_t a, uint32_t b, uint32_t *out) { return __builtin_add_overflow(a, b, out); }
int saturating_sub(int a, int b) { int r; return __builtin_sub_overflow(a, b, &r) ? (a < 0 ? INT32_MIN : INT32_MAX) : r; }

int bits(uint64_t x) { return __builtin_popcountll(x) + __builtin_clzll(x | 1) + __builtin_ctzll(x | (1ULL << 63)); }
uint32_t bswap(uint32_t x) { return __builtin_bswap32(x); }
uint64_t rotl(uint64_t x, unsigned r) { return (x << (r & 63)) | (x >> ((-r) & 63)); }
uint8_t bitrev(uint8_t x) { return __builtin_bitreverse8(x); }

int iabs(int x) { return x < 0 ? -x : x; }
long clampl(long x, long lo, long hi) { return x < lo ? lo : x > hi ? hi : x; }
unsigned umin3(unsigned a, unsigned b, unsigned c) { unsigned m = a < b ? a : b; return m < c ? m : c; }

__int128 mul128(int64_t a, int64_t b) { return (__int128)a * b; }
uint64_t mulhi(uint64_t a, uint64_t b) { return (uint64_t)(((unsigned __int128)a * b) >> 64); }

uint32_t hash_fnv(const uint8_t *p, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) { h ^= p[i]; h *= 16777619u; }
    return h;
}

int64_t ipow(int64_t b, unsigned e) {
    int64_t r = 1;
    while (e) { if (e & 1) r *= b; b *= b; e >>= 1; }
    return r;
}

_Bool all_positive(const int *x, int n) {
    _Bool ok = 1;
    for (int i = 0; i < n; i++) ok &= x[i] > 0;
    return ok;
}

unsigned _BitInt(37) odd_width(unsigned _BitInt(37) a, unsigned _BitInt(37) b) { return a * b + (a >> 3); }
