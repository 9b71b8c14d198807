// pyzyme-corpus-flags: -g
/* Debug info: DICompileUnit, DISubprogram, DILocalVariable, DILocation metadata and
   #dbg_value / #dbg_declare records, which the IR model must carry through as text. */
#include <math.h>

struct point { double x, y; };

static double dist(struct point a, struct point b) {
    double dx = a.x - b.x, dy = a.y - b.y;
    return sqrt(dx * dx + dy * dy);
}

double path_length(const struct point *p, int n) {
    double total = 0.0;
    for (int i = 1; i < n; i++) total += dist(p[i - 1], p[i]);
    return total;
}

int histogram(const double *x, int n, int *bins, int nbins) {
    int outside = 0;
    for (int i = 0; i < n; i++) {
        int b = (int)(x[i] * nbins);
        if (b < 0 || b >= nbins) { outside++; continue; }
        bins[b]++;
    }
    return outside;
}
