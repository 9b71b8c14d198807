/* enzyme/checkpoint_schedule.h as pyzyme provides it: what a schedule's name and budget mean.
 *
 * Written for pyzyme from the interface Enzyme documents (the names and the values are
 * Enzyme's, so programs written for it build unchanged; the code is pyzyme's own). Plain
 * arithmetic with no dependencies, shared by the schemes of <enzyme/checkpoint.h> and by
 * programs that keep their snapshots themselves.
 *
 * A budget is the number of checkpoints that live through a loop's reverse sweep: the slots
 * of a binomial schedule, the segments of a periodic one. A budget of 0 or less asks for the
 * default: segments of floor(sqrt(n)) steps, or floor(sqrt(n)) slots (at least 2).
 */
#ifndef PYZYME_ENZYME_CHECKPOINT_SCHEDULE_H
#define PYZYME_ENZYME_CHECKPOINT_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

/* The schedules, numbered as the loop annotations number them. */
enum {
  ENZYME_CKPT_SCHEDULE_NONE = 0,
  ENZYME_CKPT_SCHEDULE_PERIODIC = 1,  /* segments whose starts are kept */
  ENZYME_CKPT_SCHEDULE_REVOLVE = 2,   /* Griewank and Walther's binomial checkpointing */
  ENZYME_CKPT_SCHEDULE_STORE_ALL = 3, /* every step's state */
  ENZYME_CKPT_SCHEDULE_BINOMIAL = 4   /* Enzyme-MLIR's stack of slots */
};

/* The actions a scheme asks its driver for (Revolve's protocol; the values are those of
 * Checkpointing.jl's ActionFlag). */
enum {
  ENZYME_CKPT_NONE = 0,
  ENZYME_CKPT_STORE = 1,
  ENZYME_CKPT_RESTORE = 2,
  ENZYME_CKPT_FORWARD = 3,
  ENZYME_CKPT_FIRSTUTURN = 4,
  ENZYME_CKPT_UTURN = 5,
  ENZYME_CKPT_ERROR = 6,
  ENZYME_CKPT_DONE = 7
};

/* floor(sqrt(n)); 0 for n <= 0. */
static inline int64_t enzyme_ckpt_isqrt(int64_t n) {
  int64_t lo = 0, hi = n < 3037000499 ? n : 3037000499;
  if (n <= 0)
    return 0;
  while (lo < hi) { /* the largest r in [lo, hi] with r * r <= n */
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (mid <= n / mid)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* C(s + t, t), or `limit` when it is larger (no overflow). */
static inline int64_t pyzyme_ckpt_choose(int64_t s, int64_t t, int64_t limit) {
  int64_t c = 1, k;
  for (k = 1; k <= t; k++) {
    c = c * (s + k) / k; /* C(s + k, k), exactly */
    if (c > limit)
      return limit;
  }
  return c;
}

/* How far to advance from a checkpoint with `n` steps left to reverse and `s` slots left to
 * place. With t the least number of repetitions such that C(s + t, t) >= n, every advance in
 * [n - C(s - 1 + t, t), C(s - 1 + t, t - 1)] attains it (Griewank's beta); this is the middle
 * of that window (within [1, n - 1]), leaving one step for each of the s - 1 slots still to
 * be placed. With one slot the advance is all of n, so the advances from s slots add up to n. */
static inline int64_t enzyme_ckpt_binomial_progress(int64_t n, int64_t s) {
  int64_t t = 0, lo, hi, mid;
  if (n <= 0)
    return 0;
  if (n == 1 || s <= 1)
    return n;
  while (pyzyme_ckpt_choose(s, t, n) < n)
    t++;
  lo = n - pyzyme_ckpt_choose(s - 1, t, n);
  hi = t > 0 ? pyzyme_ckpt_choose(s, t - 1, n) : 0;
  if (lo < 1)
    lo = 1;
  if (hi > n - 1)
    hi = n - 1;
  mid = (lo + hi) / 2;
  if (mid > n - (s - 1))
    mid = n - (s - 1);
  return mid < 1 ? 1 : mid;
}

/* The slots a binomial schedule over n steps takes for `budget`: at most n, at least 1. */
static inline int64_t enzyme_ckpt_binomial_slots(int64_t n, int64_t budget) {
  if (budget <= 0) {
    budget = enzyme_ckpt_isqrt(n);
    if (budget < 2)
      budget = 2;
  }
  if (budget > n)
    budget = n;
  return budget < 1 ? 1 : budget;
}

/* A periodic schedule over n steps: `outer` segments of `inner` steps, then one of
 * `trailing` steps if they do not divide n. inner is n / budget rounded up, so there are at
 * most `budget` segments. */
typedef struct EnzymeCkptPeriodicSplit {
  int64_t inner;
  int64_t outer;
  int64_t trailing;
} EnzymeCkptPeriodicSplit;

/* The segment length of enzyme_ckpt_periodic_split (the schemes' own). */
static inline int64_t pyzyme_ckpt_periodic_inner(int64_t n, int64_t budget) {
  int64_t inner;
  if (n <= 0)
    return 1;
  inner = budget > 0 ? n / budget + (n % budget != 0) : enzyme_ckpt_isqrt(n);
  return inner < 1 ? 1 : inner;
}

static inline EnzymeCkptPeriodicSplit enzyme_ckpt_periodic_split(int64_t n, int64_t budget) {
  EnzymeCkptPeriodicSplit s = {1, 0, 0};
  if (n <= 0)
    return s;
  s.inner = pyzyme_ckpt_periodic_inner(n, budget);
  s.outer = n / s.inner;
  s.trailing = n - s.outer * s.inner;
  return s;
}

/* The number of segments, the trailing one included. */
static inline int64_t enzyme_ckpt_periodic_segments(EnzymeCkptPeriodicSplit s) {
  return s.outer + (s.trailing > 0 ? 1 : 0);
}

/* The first step of segment k, and its number of steps. */
static inline int64_t enzyme_ckpt_periodic_start(EnzymeCkptPeriodicSplit s, int64_t k) {
  return s.inner * k;
}

static inline int64_t enzyme_ckpt_periodic_length(EnzymeCkptPeriodicSplit s, int64_t k) {
  return k < s.outer ? s.inner : s.trailing;
}

/* The schedule a frontend's name stands for (the `len` characters at `name`, which need not
 * end there): "periodic" or "regular", "revolve", "binomial", "store_all", "none"; -1 for
 * any other. */
static inline int enzyme_ckpt_schedule_from_name(const char *name, size_t len) {
  static const struct {
    const char *name;
    int schedule;
  } names[] = {{"periodic", ENZYME_CKPT_SCHEDULE_PERIODIC},
               {"regular", ENZYME_CKPT_SCHEDULE_PERIODIC},
               {"revolve", ENZYME_CKPT_SCHEDULE_REVOLVE},
               {"binomial", ENZYME_CKPT_SCHEDULE_BINOMIAL},
               {"store_all", ENZYME_CKPT_SCHEDULE_STORE_ALL},
               {"none", ENZYME_CKPT_SCHEDULE_NONE}};
  size_t k, c;
  if (!name)
    return -1;
  for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
    const char *want = names[k].name;
    for (c = 0; c < len && want[c] && want[c] == name[c]; c++)
      ;
    if (c == len && want[c] == '\0')
      return names[k].schedule;
  }
  return -1;
}

#endif
