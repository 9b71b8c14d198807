/* Heap memory: malloc/calloc/realloc/free, linked lists, binary trees, dynamic arrays. */
#include <stdlib.h>
#include <string.h>

typedef struct tree { double key; struct tree *left, *right; } tree;

tree *tree_insert(tree *t, double key) {
    if (!t) {
        t = malloc(sizeof *t);
        t->key = key;
        t->left = t->right = NULL;
    } else if (key < t->key) {
        t->left = tree_insert(t->left, key);
    } else {
        t->right = tree_insert(t->right, key);
    }
    return t;
}

int tree_depth(const tree *t) {
    if (!t) return 0;
    int l = tree_depth(t->left), r = tree_depth(t->right);
    return 1 + (l > r ? l : r);
}

void tree_free(tree *t) { if (t) { tree_free(t->left); tree_free(t->right); free(t); } }

typedef struct { double *data; size_t len, cap; } dynarray;

int push(dynarray *a, double x) {
    if (a->len == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 4;
        double *d = realloc(a->data, cap * sizeof *d);
        if (!d) return -1;
        a->data = d;
        a->cap = cap;
    }
    a->data[a->len++] = x;
    return 0;
}

double *zeros(size_t n) { return calloc(n, sizeof(double)); }

double *copy_scaled(const double *x, size_t n, double s) {
    double *y = malloc(n * sizeof *y);
    if (!y) return NULL;
    memcpy(y, x, n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] *= s;
    return y;
}

double sum_then_free(size_t n) {
    double *x = malloc(n * sizeof *x), s = 0.0;
    for (size_t i = 0; i < n; i++) x[i] = (double)i;
    for (size_t i = 0; i < n; i++) s += x[i];
    free(x);
    return s;
}

double stack_buffer(int n) {
    double *tmp = __builtin_alloca(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) tmp[i] = 1.0 / (i + 1);
    double s = 0.0;
    for (int i = 0; i < n; i++) s += tmp[i];
    return s;
}
