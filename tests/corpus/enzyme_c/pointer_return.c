// Callees returning pointers into active memory, as std::map's operator[] does: the value
// slot of a search tree's node, found or inserted. The function is recursive (not in tail
// position: it counts the lookups passing through each node), so it stays a call at every
// level; the derivative reads and writes through the returned pointer's shadow.
#include "test_utils.h"

void __enzyme_autodiff(void *, ...);
void __enzyme_fwddiff(void *, ...);

struct tree {
  struct tree *left, *right;
  long key, visits;
  double value;
};

// The value of key, inserted (0) when the tree has none.
double *slot(struct tree **t, long key) {
  struct tree *n = *t;
  if (!n) {
    n = *t = (struct tree *)malloc(sizeof *n);
    n->left = n->right = 0;
    n->key = key;
    n->visits = 0;
    n->value = 0;
    return &n->value;
  }
  double *found = key == n->key ? &n->value : slot(key < n->key ? &n->left : &n->right, key);
  n->visits++;
  return found;
}

// m[2] = m[1]^2 + 3 m[2] + m[7] (m[7] is inserted: 0)
void square(struct tree **m) {
  double x = *slot(m, 1);
  double *y = slot(m, 2);
  *y = x * x + 3 * *y + *slot(m, 7);
}

static void put(struct tree **m, long key, double v) { *slot(m, key) = v; }
static double get(struct tree **m, long key) { return *slot(m, key); }

int main(void) {
  // The shadow tree has the primal's keys, in the same places.
  struct tree *m = 0, *dm = 0;
  put(&m, 2, 0.5), put(&m, 1, 3.0);
  put(&dm, 2, 1.0), put(&dm, 1, 0.0);
  __enzyme_autodiff((void *)square, enzyme_dup, &m, &dm);
  APPROX_EQ(get(&m, 2), 3.0 * 3.0 + 3 * 0.5, 1e-12);
  APPROX_EQ(get(&dm, 1), 2 * 3.0, 1e-12);
  APPROX_EQ(get(&dm, 2), 3.0, 1e-12);
  // The inserted node has a shadow in dm, where the 0 stored in it has no adjoint.
  APPROX_EQ(dm->right->key, 7, 0);
  APPROX_EQ(dm->right->value, 0.0, 0);

  struct tree *f = 0, *tf = 0;
  put(&f, 2, 0.5), put(&f, 1, 3.0);
  put(&tf, 2, 0.25), put(&tf, 1, 1.0);
  __enzyme_fwddiff((void *)square, enzyme_dup, &f, &tf);
  APPROX_EQ(get(&f, 2), 3.0 * 3.0 + 3 * 0.5, 1e-12);
  APPROX_EQ(get(&tf, 2), 2 * 3.0 * 1.0 + 3 * 0.25, 1e-12);
  APPROX_EQ(tf->right->key, 7, 0);
  return failures;
}
