/* switch: dense (lookup table / jump table), sparse, fallthrough, state machines. */
double apply_op(int op, double a, double b) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return a < b ? a : b;
    case 5: return a > b ? a : b;
    default: return 0.0;
    }
}

int days_in_month(int m) {
    switch (m) {
    case 2: return 28;
    case 4: case 6: case 9: case 11: return 30;
    default: return 31;
    }
}

int sparse(long key) {
    switch (key) {
    case -1000000: return 1;
    case 17: return 2;
    case 4096: return 3;
    case 1L << 40: return 4;
    default: return 0;
    }
}

int fallthrough(int n) {
    int s = 0;
    switch (n & 3) {
    case 3: s += 3; /* fallthrough */
    case 2: s += 2; /* fallthrough */
    case 1: s += 1; break;
    case 0: s = -1;
    }
    return s;
}

/* counts numbers in a string with a small state machine */
int count_numbers(const char *s) {
    enum { OUT, IN } state = OUT;
    int count = 0;
    for (; *s; s++) {
        switch (state) {
        case OUT:
            if (*s >= '0' && *s <= '9') { state = IN; count++; }
            break;
        case IN:
            if (!(*s >= '0' && *s <= '9')) state = OUT;
            break;
        }
    }
    return count;
}

double piecewise(int region, double x) {
    double y;
    switch (region) {
    case 0: y = x * x; break;
    case 1: y = 2.0 * x - 1.0; break;
    case 7: y = -x; break;
    case 12: y = x * x * x; break;
    default: y = 0.0;
    }
    return y + 1.0;
}
