/* GCC/clang vector extensions: vector arithmetic, shufflevector, insert/extractelement,
   vector compares and selects, conversions, ext_vector_type swizzles. */
typedef double v2d __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef int v4i __attribute__((vector_size(16)));
typedef float float4 __attribute__((ext_vector_type(4)));
typedef unsigned char v16u8 __attribute__((vector_size(16)));

v4d vfma(v4d a, v4d b, v4d c) { return a * b + c; }

double hsum(v4d a) { return a[0] + a[1] + a[2] + a[3]; }

v4f reverse4(v4f a) { return __builtin_shufflevector(a, a, 3, 2, 1, 0); }

v4f interleave(v4f a, v4f b) { return __builtin_shufflevector(a, b, 0, 4, 1, 5); }

v4d widen(v2d lo, v2d hi) { return __builtin_shufflevector(lo, hi, 0, 1, 2, 3); }

v4i compare(v4f a, v4f b) { return a < b; }

v4f vmax(v4f a, v4f b) { v4i m = a > b; return (v4f)((m & (v4i)a) | (~m & (v4i)b)); }

v4d vmin_builtin(v4d a, v4d b) { return __builtin_elementwise_min(a, b); }

v4f set_lane(v4f a, int i, float x) { a[i & 3] = x; return a; }

v4i to_int(v4f a) { return __builtin_convertvector(a, v4i); }

v4f splat_scale(v4f a, float s) { return a * s; }

float4 swizzle(float4 a) { return a.wzyx + a.xxyy * 2.0f; }

v16u8 byte_ops(v16u8 a, v16u8 b) { return (a & b) | ((a >> 1) ^ ~b); }

double dot_v(int n, const v4d *x, const v4d *y) {
    v4d acc = {0, 0, 0, 0};
    for (int i = 0; i < n; i++) acc += x[i] * y[i];
    return hsum(acc);
}
