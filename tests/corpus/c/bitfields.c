/* Bitfields: packed flags, signed fields, read-modify-write, packed structs. */
#include <stdint.h>

struct flags {
    unsigned ready : 1;
    unsigned mode : 3;
    signed delta : 5;
    unsigned count : 12;
    unsigned long long big : 40;
};

int flags_read(const struct flags *f) { return f->ready + f->mode * 2 + f->delta + (int)f->count; }

void flags_bump(struct flags *f) {
    f->count++;
    f->delta = -f->delta;
    f->mode = (f->mode + 1) & 7;
    f->big += 1ULL << 33;
}

struct flags flags_make(int mode, int delta) {
    struct flags f = {0};
    f.ready = 1;
    f.mode = mode;
    f.delta = delta;
    return f;
}

struct __attribute__((packed)) header { uint8_t type; uint32_t length; uint16_t crc; };

uint32_t header_sum(const struct header *h, int n) {
    uint32_t s = 0;
    for (int i = 0; i < n; i++) s += h[i].type + h[i].length + h[i].crc;
    return s;
}

typedef struct { unsigned r : 5, g : 6, b : 5; } rgb565;
unsigned short pack_rgb(int r, int g, int b) {
    rgb565 c = {r >> 3, g >> 2, b >> 3};
    return (unsigned short)(c.r << 11 | c.g << 5 | c.b);
}
