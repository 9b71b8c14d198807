/* Shared by the self-checking programs of tests/test_enzyme_c.py: Enzyme's markers and an
 * approximate comparison that counts failures (main returns their number). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

extern int enzyme_dup, enzyme_dupnoneed, enzyme_out, enzyme_const, enzyme_width;
extern int enzyme_tape, enzyme_allocated, enzyme_primal_return, enzyme_const_return;
extern int enzyme_active_return, enzyme_dupv, enzyme_scalar, enzyme_vector;

static int failures = 0;

#define APPROX_EQ(got, want, tol)                                                      \
  do {                                                                                 \
    double got_ = (got), want_ = (want);                                               \
    if (!(fabs(got_ - want_) <= (tol) * (1.0 + fabs(want_)))) {                        \
      fprintf(stderr, "%s:%d: %s = %.17g, expected %.17g\n", __FILE__, __LINE__, #got, \
              got_, want_);                                                            \
      failures++;                                                                      \
    }                                                                                  \
  } while (0)
