/* Unusual control flow: computed goto (indirectbr, blockaddress), goto, setjmp/longjmp,
   unreachable, noreturn calls, __builtin_expect and __builtin_assume. */
#include <setjmp.h>
#include <stdlib.h>

int interpret(const unsigned char *code, int n) {
    static void *labels[] = {&&op_inc, &&op_dec, &&op_dbl, &&op_end};
    int acc = 0, pc = 0;
#define NEXT() do { if (pc >= n) return acc; goto *labels[code[pc++] & 3]; } while (0)
    NEXT();
op_inc: acc++; NEXT();
op_dec: acc--; NEXT();
op_dbl: acc *= 2; NEXT();
op_end: return acc;
#undef NEXT
}

int with_goto(int n) {
    int i = 0, s = 0;
again:
    s += i;
    if (++i < n) goto again;
    if (s > 1000) goto big;
    return s;
big:
    return -s;
}

static jmp_buf env;
static void fail(int code) { longjmp(env, code); }

int guarded(int x) {
    int r = setjmp(env);
    if (r) return -r;
    if (x < 0) fail(7);
    return x * 2;
}

int checked(int x) {
    if (__builtin_expect(x < 0, 0)) abort();
    __builtin_assume(x < 1000000);
    return x * 3 / 2;
}

int must_be_small(int x) {
    switch (x) {
    case 0: return 10;
    case 1: return 20;
    default: __builtin_unreachable();
    }
}

void prefetch_sum(const double *x, int n, double *out) {
    double s = 0.0;
    for (int i = 0; i < n; i++) { __builtin_prefetch(x + i + 16); s += x[i]; }
    *out = s;
}

int trap_if(int x) { if (x == 42) __builtin_trap(); return x; }
