/* Inline assembly and target-ish builtins: asm with outputs/clobbers, memory barriers,
   rdtsc, stack save/restore around VLAs, frame addresses, object size checks. */
#include <stdint.h>
#include <string.h>

uint64_t cycles(void) {
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

int add_asm(int a, int b) {
    int r;
    __asm__("addl %2, %0" : "=r"(r) : "0"(a), "r"(b) : "cc");
    return r;
}

void compiler_barrier(void) { __asm__ __volatile__("" ::: "memory"); }

double vla_loop(int n) {
    double s = 0.0;
    for (int k = 1; k <= n; k++) {
        double buf[k];
        for (int i = 0; i < k; i++) buf[i] = (double)i / k;
        s += buf[k - 1];
    }
    return s;
}

void *frame(void) { return __builtin_frame_address(0); }
void *ret_addr(void) { return __builtin_return_address(0); }

size_t safe_copy(char *dst, const char *src, size_t n) {
    size_t cap = __builtin_object_size(dst, 0);
    if (n > cap) n = cap;
    memcpy(dst, src, n);
    return n;
}

int cpu_has_avx(void) { return __builtin_cpu_supports("avx"); }
