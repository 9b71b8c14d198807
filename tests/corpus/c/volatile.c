/* volatile loads and stores, volatile memcpy/memset, memory-mapped style registers. */
#include <stdint.h>
#include <string.h>

volatile int sink;
static volatile double samples[16];

void spin(int n) { for (volatile int i = 0; i < n; i++) sink = i; }

double read_samples(void) {
    double s = 0.0;
    for (int i = 0; i < 16; i++) s += samples[i];
    return s;
}

void write_reg(volatile uint32_t *reg, uint32_t v) {
    *reg = v;
    while ((*reg & 1u) == 0) {
    }
    reg[1] = v >> 16;
}

void secure_zero(void *p, size_t n) {
    volatile unsigned char *q = p;
    while (n--) *q++ = 0;
}

struct regs { volatile uint32_t ctrl, status; uint32_t data[4]; };
void copy_regs(volatile struct regs *dst, const struct regs *src) {
    dst->ctrl = src->ctrl;
    dst->status = 0;
    __builtin_memcpy((void *)dst->data, src->data, sizeof src->data);
}

double keep_alive(double x) {
    volatile double y = x * 2.0;
    return y + y;
}
