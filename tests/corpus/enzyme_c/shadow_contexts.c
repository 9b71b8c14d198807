// Enzyme's contexts of global shadows: a derivative call passed enzyme_context takes the
// shadows of the globals its code uses from the context, made when first asked for (zeroed;
// a global's integers copied, its pointers pointing to the shadows of their targets, a heap
// block's shadow a zeroed block as large); __enzyme_zero_shadows zeroes a context; contexts
// are independent of each other; forward mode reads tangents there, one per lane of a
// context's width; a context made inside differentiated code (forward over reverse).
#include "test_utils.h"

void *__enzyme_context(int);
void *__enzyme_shadow(void *, void *, int);
void __enzyme_zero_shadows(void *);
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
void *__enzyme_augmentfwd(void *, ...);
void __enzyme_reverse(void *, ...);
typedef struct {
  double d0, d1;
} Pair;
Pair __enzyme_fwddiff2(void *, ...) __asm__("__enzyme_fwddiff");
extern int enzyme_context;

double rate = 0.5;
double coef[3] = {1.0, -2.0, 3.0};
double offset = 0.25;  // never asked for before the derivatives use it
struct {
  double *data;
  long n;
  double scale;
} view = {coef, 3, 2.0};
double *heap;
int nheap;
double scratch;  // written by the differentiated code

// rate x^2 + c0 + c1 x + c2 x^3 + offset x
double poly(double x) {
  return rate * x * x + coef[0] + coef[1] * x + coef[2] * x * x * x + offset * x;
}
static double dpoly(double x) {
  return 2 * rate * x + coef[1] + 3 * coef[2] * x * x + offset;
}

// scale * sum_i data[i] x
double through_view(double x) {
  double s = 0;
  for (long i = 0; i < view.n; i++) s += view.data[i] * x;
  return s * view.scale;
}

// sum_i heap[i]^2 x
double heap_sum(double x) {
  double s = 0;
  for (int i = 0; i < nheap; i++) s += heap[i] * heap[i] * x;
  return s;
}

// a struct assigned as a whole outside the derivatives
__attribute__((noinline)) static void point_view_at(double *data, long n) {
  __typeof__(view) v = {data, n, view.scale};
  view = v;
}

// scratch = x^2, then scratch * rate
double via_scratch(double x) {
  scratch = x * x;
  return scratch * rate;
}

void poly_into(const double *x, double *out) { *out = poly(*x); }

// d poly / dx, taken by reverse mode inside: its derivative is forward over reverse.
double dpoly_dx(double x) {
  void *inner = __enzyme_context(1);
  return __enzyme_autodiff((void *)poly, enzyme_context, inner, x);
}

__attribute__((noinline)) static void fill_heap(int n) {
  free(heap);
  heap = (double *)malloc(n * sizeof(double));
  nheap = n;
  for (int i = 0; i < n; i++) heap[i] = 0.5 * (i + 1);
}

int main(void) {
  void *ctx = __enzyme_context(1);
  double *drate = (double *)__enzyme_shadow(ctx, &rate, 0);
  double *dcoef = (double *)__enzyme_shadow(ctx, coef, 0);
  APPROX_EQ(*drate, 0.0, 0);
  for (int round = 1; round <= 3; round++) {  // zeroed each round: no accumulation
    __enzyme_zero_shadows(ctx);
    double x = 0.5 * round;
    APPROX_EQ(__enzyme_autodiff((void *)poly, enzyme_context, ctx, x), dpoly(x), 1e-12);
    APPROX_EQ(*drate, x * x, 1e-12);
    APPROX_EQ(dcoef[0], 1.0, 1e-12);
    APPROX_EQ(dcoef[1], x, 1e-12);
    APPROX_EQ(dcoef[2], x * x * x, 1e-12);
    APPROX_EQ(*(double *)__enzyme_shadow(ctx, &offset, 0), x, 1e-12);
  }
  // Without zeroing, a second call adds to the shadows.
  __enzyme_autodiff((void *)poly, enzyme_context, ctx, 1.5);
  APPROX_EQ(*drate, 2 * 1.5 * 1.5, 1e-12);

  // Another context: its own shadows, the first's untouched.
  void *other = __enzyme_context(1);
  __enzyme_autodiff((void *)poly, enzyme_context, other, 2.0);
  APPROX_EQ(*(double *)__enzyme_shadow(other, &rate, 0), 4.0, 1e-12);
  APPROX_EQ(*drate, 2 * 1.5 * 1.5, 1e-12);

  // Forward mode: the tangents of the globals are read from the context.
  __enzyme_zero_shadows(ctx);
  *drate = 1.0;
  dcoef[1] = -1.0;
  APPROX_EQ(__enzyme_fwddiff((void *)poly, enzyme_context, ctx, 2.0, 0.0), 4.0 - 2.0, 1e-12);
  APPROX_EQ(__enzyme_fwddiff((void *)poly, enzyme_context, ctx, 2.0, 1.0),
            dpoly(2.0) + 4.0 - 2.0, 1e-12);

  // Split mode: both halves take the context's shadows.
  void *split = __enzyme_context(1);
  double sx = 1.5, dsx = 0, out = 0, dout = 1.0;
  void *tape = __enzyme_augmentfwd((void *)poly_into, enzyme_context, split, &sx, &dsx, &out,
                                   &dout);
  APPROX_EQ(out, poly(sx), 1e-12);
  __enzyme_reverse((void *)poly_into, enzyme_context, split, &sx, &dsx, &out, &dout, tape);
  APPROX_EQ(dsx, dpoly(sx), 1e-12);
  APPROX_EQ(*(double *)__enzyme_shadow(split, &rate, 0), sx * sx, 1e-12);

  // A struct: its integer copied, its pointer to the shadow of the array it points to.
  void *vctx = __enzyme_context(1);
  double **ddata = (double **)__enzyme_shadow(vctx, &view.data, 0);
  long *dn = (long *)__enzyme_shadow(vctx, &view.n, 0);
  double *dvcoef = (double *)__enzyme_shadow(vctx, &coef, 0);
  double *dscale = (double *)__enzyme_shadow(vctx, &view.scale, 0);
  APPROX_EQ((double)*dn, 3.0, 0);
  APPROX_EQ((double)(*ddata == dvcoef), 1.0, 0);
  double x = 1.25;
  APPROX_EQ(__enzyme_autodiff((void *)through_view, enzyme_context, vctx, x),
            2.0 * (1.0 - 2.0 + 3.0), 1e-12);
  for (int i = 0; i < 3; i++) APPROX_EQ(dvcoef[i], 2.0 * x, 1e-12);
  APPROX_EQ(*dscale, (1.0 - 2.0 + 3.0) * x, 1e-12);
  point_view_at(coef + 1, 2);  // the shadow follows: the shadow of coef, one element on
  APPROX_EQ((double)(*ddata == dvcoef + 1), 1.0, 0);
  APPROX_EQ((double)*dn, 3.0, 0);  // an integer is copied once, when the shadow is made

  // Width 2: one shadow per lane.
  void *wide = __enzyme_context(2);
  *(double *)__enzyme_shadow(wide, &rate, 0) = 1.0;
  ((double *)__enzyme_shadow(wide, coef, 1))[2] = 1.0;
  APPROX_EQ((double)(*(double **)__enzyme_shadow(wide, &view.data, 1) ==
                     (double *)__enzyme_shadow(wide, coef, 1) + 1), 1.0, 0);
  Pair t = __enzyme_fwddiff2((void *)poly, enzyme_context, wide, 2.0, 0.0, 0.0);
  APPROX_EQ(t.d0, 4.0, 1e-12);
  APPROX_EQ(t.d1, 8.0, 1e-12);

  // A pointer to a heap block: the shadow is a zeroed block as large, and another block
  // stored in the global later gets its own.
  fill_heap(4);
  void *hctx = __enzyme_context(1);
  double **dheap = (double **)__enzyme_shadow(hctx, &heap, 0);
  APPROX_EQ(heap_sum(2.0), 2.0 * (0.25 + 1 + 2.25 + 4), 1e-12);
  APPROX_EQ(__enzyme_autodiff((void *)heap_sum, enzyme_context, hctx, 2.0), 7.5, 1e-12);
  for (int i = 0; i < 4; i++) APPROX_EQ((*dheap)[i], 2 * heap[i] * 2.0, 1e-12);
  fill_heap(6);
  for (int i = 0; i < 6; i++) APPROX_EQ((*dheap)[i], 0.0, 0);
  APPROX_EQ(__enzyme_autodiff((void *)heap_sum, enzyme_context, hctx, 3.0),
            0.25 * (1 + 4 + 9 + 16 + 25 + 36), 1e-12);
  for (int i = 0; i < 6; i++) APPROX_EQ((*dheap)[i], 2 * heap[i] * 3.0, 1e-12);
  __enzyme_zero_shadows(hctx);
  for (int i = 0; i < 6; i++) APPROX_EQ((*dheap)[i], 0.0, 0);

  // A global the code writes, through the context.
  void *sctx = __enzyme_context(1);
  APPROX_EQ(__enzyme_autodiff((void *)via_scratch, enzyme_context, sctx, 3.0), 6.0 * rate,
            1e-12);
  APPROX_EQ(*(double *)__enzyme_shadow(sctx, &rate, 0), 9.0, 1e-12);

  // Forward over reverse, the inner context made in the differentiated function.
  void *outer = __enzyme_context(1);
  double *orate = (double *)__enzyme_shadow(outer, &rate, 0);
  APPROX_EQ(__enzyme_fwddiff((void *)dpoly_dx, enzyme_context, outer, 2.0, 1.0),
            2 * rate + 6 * coef[2] * 2.0, 1e-12);
  *orate = 1.0;
  APPROX_EQ(__enzyme_fwddiff((void *)dpoly_dx, enzyme_context, outer, 2.0, 0.0), 4.0, 1e-12);
  free(heap);
  return failures;
}
