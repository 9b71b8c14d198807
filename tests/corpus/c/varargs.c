/* Variadic functions: va_start/va_arg/va_end/va_copy, vsnprintf forwarding. */
#include <stdarg.h>
#include <stdio.h>

double sum_doubles(int n, ...) {
    va_list ap;
    va_start(ap, n);
    double s = 0.0;
    for (int i = 0; i < n; i++) s += va_arg(ap, double);
    va_end(ap);
    return s;
}

long mixed(const char *fmt, ...) {
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    long total = 0;
    for (const char *p = fmt; *p; p++) {
        switch (*p) {
        case 'i': total += va_arg(ap, int); break;
        case 'l': total += va_arg(ap, long); break;
        case 'd': total += (long)va_arg(ap, double); break;
        case 'p': total += *va_arg(ap, int *); break;
        }
    }
    int first = *fmt == 'i' ? va_arg(again, int) : 0;
    va_end(again);
    va_end(ap);
    return total + first;
}

int format_into(char *buf, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return r;
}

double call_sum(void) { return sum_doubles(3, 1.0, 2.5, -0.5) + (double)mixed("ild", 1, 2L, 3.0); }
