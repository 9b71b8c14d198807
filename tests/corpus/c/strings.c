/* Strings: literals (private unnamed_addr constants), libc string calls, char loops. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t my_strlen(const char *s) { const char *p = s; while (*p) p++; return (size_t)(p - s); }

int count_vowels(const char *s) {
    int n = 0;
    for (; *s; s++) n += strchr("aeiouAEIOU", *s) != NULL;
    return n;
}

void to_upper(char *s) { for (; *s; s++) *s = (char)toupper((unsigned char)*s); }

int compare_names(const char *a, const char *b) { return strcmp(a, b) + strncmp(a, b, 3) + memcmp(a, b, 2); }

char *join(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *out = malloc(na + nb + 2);
    if (!out) return NULL;
    memcpy(out, a, na);
    out[na] = ' ';
    strcpy(out + na + 1, b);
    return out;
}

const char *weekday(int d) {
    static const char *names[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
    return names[d % 7];
}

double parse_sum(const char *csv) {
    double s = 0.0;
    char *end;
    while (*csv) {
        s += strtod(csv, &end);
        if (end == csv) break;
        csv = *end == ',' ? end + 1 : end;
    }
    return s;
}

int describe(char *buf, size_t n, double x, int k) { return snprintf(buf, n, "x=%.3f k=%d %s", x, k, "done"); }

void reverse(char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n / 2; i++) { char t = s[i]; s[i] = s[n - 1 - i]; s[n - 1 - i] = t; }
}

static const char wide_message[] = "tab\there, quote\" backslash\\ newline\n \x01\x7f\xff";
int checksum(void) { int s = 0; for (size_t i = 0; i < sizeof wide_message; i++) s += (unsigned char)wide_message[i]; return s; }
