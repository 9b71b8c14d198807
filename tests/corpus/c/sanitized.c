// pyzyme-corpus-flags: -fsanitize=undefined -fstack-protector-strong
/* Instrumented code: UBSan checks (overflow intrinsics feeding __ubsan_handle_* calls,
   nosanitize metadata, type descriptor globals) and stack protectors (sspstrong). */
#include <string.h>

int checked_ops(int a, int b, int s) {
    int x = a + b;
    int y = a * b - x;
    int z = y / (b | 1) + (a << (s & 15)) + y % 7;
    return -z;
}

double table_lookup(const double *t, int i) {
    double local[8];
    for (int k = 0; k < 8; k++) local[k] = t[k] * k;
    return local[i & 7];
}

int to_int(double x) { return (int)x; }

void copy_name(char *dst, const char *src) {
    char buf[32];
    strncpy(buf, src, sizeof buf - 1);
    buf[31] = 0;
    strcpy(dst, buf);
}
