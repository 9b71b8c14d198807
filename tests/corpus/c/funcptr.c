/* Function pointers: callbacks, dispatch tables, qsort comparators, returned pointers. */
#include <stdlib.h>

typedef double (*unary)(double);

static double sq(double x) { return x * x; }
static double cube(double x) { return x * x * x; }
static double twice(double x) { return 2.0 * x; }

static const unary table[] = {sq, cube, twice};

double apply_table(int i, double x) { return table[i % 3](x); }

double integrate(unary f, double a, double b, int n) {
    double h = (b - a) / n, s = 0.5 * (f(a) + f(b));
    for (int i = 1; i < n; i++) s += f(a + i * h);
    return s * h;
}

double integrate_sq(double a, double b) { return integrate(sq, a, b, 100); }

unary pick(int which) { return which ? cube : sq; }

double compose(unary f, unary g, double x) { return f(g(x)); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void sort_doubles(double *x, size_t n) { qsort(x, n, sizeof *x, cmp_double); }

struct op { const char *name; double (*fn)(double, double); };
static double add(double a, double b) { return a + b; }
static double mul(double a, double b) { return a * b; }
static struct op ops[] = {{"add", add}, {"mul", mul}};

double fold(int which, const double *x, int n, double init) {
    double acc = init;
    for (int i = 0; i < n; i++) acc = ops[which & 1].fn(acc, x[i]);
    return acc;
}
