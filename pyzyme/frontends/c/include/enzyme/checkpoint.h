/* enzyme/checkpoint.h as pyzyme provides it to `pyzyme cc`: checkpointed time loops.
 *
 * Written for pyzyme from the interface Enzyme documents (the names, the layouts of the
 * structs and the action protocol are Enzyme's, so programs written for it build unchanged;
 * the code is pyzyme's own).
 *
 *     __enzyme_checkpoint_for((void *)step, start, n,
 *                             enzyme_scheme, &scheme, &config,
 *                             [enzyme_checkpoint_region, ptr, bytes,]...
 *                             args...);
 *
 * runs `for (j = 0; j < n; j++) step(start + j, args...)`. Differentiated in reverse mode,
 * pyzyme keeps no tape across steps: it asks the scheme which states to snapshot, which steps
 * to run again and when to turn around, and differentiates one step at a time (its forward
 * and reverse passes together). A snapshot holds the regions the call marks plus every
 * global variable the step writes; `pyzyme cc` refuses a step that writes through an
 * argument no region covers.
 *
 * The actions (EnzymeCkptAction), as the driver pyzyme generates carries them out:
 *
 *   STORE      (iteration c, cpnum k)    the state is the one before step c: save it in slot k
 *   FORWARD    (startiteration a, iteration b)  run steps a, ..., b-1 without taping
 *   FIRSTUTURN (iteration b)  the state is the one before the last step, b-1: the driver
 *                             saves it in slot -2 and runs that step; the reverse sweep
 *                             starts by restoring slot -2 and differentiating it
 *   UTURN      (iteration b)  the state is the one before step b-1: differentiate it
 *   RESTORE    (iteration c, cpnum k)    load slot k, the state before step c
 *   DONE       the schedule is complete (the first action when n is 0)
 *
 * The driver's slot -1 holds the state the reverse sweep starts from; it is restored when
 * the schedule is done, so the program's state is what its forward pass left.
 *
 * Reference schemes, used as `enzyme_scheme, &EnzymeCkptRevolve, &config`:
 *
 *   EnzymeCkptRevolve   binomial checkpointing with config.snapshots slots: every step is
 *                       run again at most r times, r the least with C(s + r, s) >= n
 *   EnzymeCkptPeriodic  config.snapshots segments; the segment being reversed stores the
 *                       state before each of its steps
 *   EnzymeCkptStoreAll  a snapshot before every step
 *
 * Their snapshots are kept in memory (config.spill_dir is not supported: it must be NULL).
 */
#ifndef PYZYME_ENZYME_CHECKPOINT_H
#define PYZYME_ENZYME_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ENZYME_CKPT_ABI_VERSION 1

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

typedef struct EnzymeCkptAction {
  int32_t flag;
  int64_t iteration;
  int64_t startiteration;
  int64_t cpnum;
} EnzymeCkptAction;

/* One piece of memory a snapshot holds (addrspace 0: host memory). */
typedef struct EnzymeCkptRegion {
  void *ptr;
  uint64_t bytes;
  uint32_t addrspace;
  uint32_t flags;
} EnzymeCkptRegion;

typedef struct EnzymeCheckpointScheme {
  uint32_t version;
  /* nsteps is -1 for a while loop; snapshot_bytes is the size of all regions. */
  void *(*init)(void *data, int64_t nsteps, uint64_t snapshot_bytes);
  void (*next_action)(void *state, EnzymeCkptAction *out);
  void (*store)(void *state, int64_t slot, int64_t step, const EnzymeCkptRegion *regions,
                uint64_t nregions);
  void (*restore)(void *state, int64_t slot, int64_t step, const EnzymeCkptRegion *regions,
                  uint64_t nregions);
  void (*set_nsteps)(void *state, int64_t nsteps);
  void (*finalize)(void *state);
  /* Not called by pyzyme's driver: a scheme must set store and restore. */
  void (*save_state)(void *state, int64_t slot, int64_t step, void *env);
  void (*load_state)(void *state, int64_t slot, int64_t step, void *env);
  void (*set_paths)(void *state, const int64_t *paths, uint64_t len);
} EnzymeCheckpointScheme;

extern int enzyme_scheme;
extern int enzyme_checkpoint_region;

void __enzyme_checkpoint_for(void *step, int64_t start, int64_t n, ...);
void __enzyme_checkpoint_while(void *step, ...);

typedef struct EnzymeCkptStats {
  int64_t forward_steps; /* steps run without taping */
  int64_t taped_steps;   /* steps differentiated (one per step) */
  int64_t stores;
  int64_t restores;
  int64_t max_slots; /* the most slots holding a snapshot at once */
  uint64_t max_bytes;
} EnzymeCkptStats;

typedef struct EnzymeCkptConfig {
  int64_t snapshots; /* Revolve: slots; Periodic: segments */
  int verbose;       /* 1: a summary on stderr; 2: also every action */
  const char *spill_dir;
  uint64_t mem_budget;
  EnzymeCkptStats *stats; /* filled in when the schedule completes, if not NULL */
} EnzymeCkptConfig;

/* -- pyzyme's schemes: a queue of actions, and the slots ------------------------------- */

typedef struct pyzyme_ckpt_state {
  const EnzymeCkptConfig *config;
  uint64_t bytes;
  int64_t steps;
  EnzymeCkptAction *queue;
  int64_t qlen, qpos, qcap;
  void **slots; /* slot k at index k + 2 */
  int64_t nslots, held;
  int online; /* a while loop still running: store before every step */
  EnzymeCkptStats stats;
} pyzyme_ckpt_state;

static inline void pyzyme_ckpt_fail(const char *msg) {
  fprintf(stderr, "enzyme/checkpoint.h: %s\n", msg);
  abort();
}

static inline void pyzyme_ckpt_push(pyzyme_ckpt_state *s, int32_t flag, int64_t iteration,
                                    int64_t start, int64_t cpnum) {
  EnzymeCkptAction *a;
  if (flag == ENZYME_CKPT_FORWARD && iteration == start)
    return;
  if (s->qlen == s->qcap) {
    s->qcap = s->qcap ? 2 * s->qcap : 32;
    s->queue = (EnzymeCkptAction *)realloc(s->queue, s->qcap * sizeof(EnzymeCkptAction));
    if (!s->queue)
      pyzyme_ckpt_fail("out of memory for the schedule");
  }
  a = &s->queue[s->qlen++];
  a->flag = flag;
  a->iteration = iteration;
  a->startiteration = start;
  a->cpnum = cpnum;
}

static inline pyzyme_ckpt_state *pyzyme_ckpt_new(void *data, int64_t nsteps, uint64_t bytes) {
  pyzyme_ckpt_state *s = (pyzyme_ckpt_state *)calloc(1, sizeof(pyzyme_ckpt_state));
  if (!s)
    pyzyme_ckpt_fail("out of memory");
  s->config = (const EnzymeCkptConfig *)data;
  if (s->config && s->config->spill_dir)
    pyzyme_ckpt_fail("config.spill_dir is not supported: snapshots stay in memory");
  s->bytes = bytes;
  s->steps = nsteps;
  return s;
}

/* The least r with C(s + r, s) >= l: how often Revolve runs a step again with s slots. */
static inline int64_t pyzyme_ckpt_repetitions(int64_t s, int64_t l) {
  int64_t r = 0;
  double beta = 1.0; /* C(s + r, s) */
  while (beta < (double)l) {
    r++;
    beta = beta * (double)(s + r) / (double)r;
  }
  return r;
}

static inline double pyzyme_ckpt_beta(int64_t s, int64_t r) {
  double beta = 1.0;
  int64_t k;
  for (k = 1; k <= r; k++)
    beta = beta * (double)(s + k) / (double)k;
  return beta;
}

/* Reverse steps a, ..., b-1, the state before step a being in slot `slot` (slots slot+1 ..
 * slot+free are free). `here`: the state is the one before step a; `first`: the forward sweep
 * is still going (the last step is its first turn). Binomial split: with s = free + 1 slots
 * and r repetitions, advance by l1 and store there, so that [a + l1, b) is reversed with one
 * slot fewer and [a, a + l1) with one repetition fewer. Any l1 with
 * C(s + r - 2, s) <= l1 <= C(s + r - 1, s) and l - l1 <= C(s + r - 1, s - 1) costs the least
 * forward steps, r l - C(s + r, s + 1) (Griewank and Walther, ACM TOMS 26(1), 2000). */
static inline void pyzyme_ckpt_binomial(pyzyme_ckpt_state *s, int64_t a, int64_t b,
                                        int64_t slot, int64_t free, int here, int first) {
  int64_t l = b - a, j;
  while (l > 1 && free > 0) {
    int64_t r = pyzyme_ckpt_repetitions(free + 1, l);
    int64_t l1 = l - (int64_t)pyzyme_ckpt_beta(free, r);
    int64_t low = r >= 2 ? (int64_t)pyzyme_ckpt_beta(free + 1, r - 2) : 1;
    if (l1 < low)
      l1 = low;
    if (l1 > l - 1)
      l1 = l - 1;
    if (l1 < 1)
      l1 = 1;
    if (!here)
      pyzyme_ckpt_push(s, ENZYME_CKPT_RESTORE, a, a, slot);
    pyzyme_ckpt_push(s, ENZYME_CKPT_FORWARD, a + l1, a, slot);
    pyzyme_ckpt_push(s, ENZYME_CKPT_STORE, a + l1, a + l1, slot + 1);
    pyzyme_ckpt_binomial(s, a + l1, b, slot + 1, free - 1, 1, first);
    first = 0;
    here = 0;
    b = a + l1;
    l = l1;
  }
  /* One slot left: every step from a. */
  for (j = b - 1; j >= a; j--) {
    if (!here)
      pyzyme_ckpt_push(s, ENZYME_CKPT_RESTORE, a, a, slot);
    pyzyme_ckpt_push(s, ENZYME_CKPT_FORWARD, j, a, slot);
    pyzyme_ckpt_push(s, first ? ENZYME_CKPT_FIRSTUTURN : ENZYME_CKPT_UTURN, j + 1, j, slot);
    first = 0;
    here = 0;
  }
}

static inline void *pyzyme_ckpt_revolve_init(void *data, int64_t nsteps, uint64_t bytes) {
  pyzyme_ckpt_state *s = pyzyme_ckpt_new(data, nsteps, bytes);
  int64_t slots = s->config ? s->config->snapshots : 1;
  if (nsteps < 0)
    pyzyme_ckpt_fail("EnzymeCkptRevolve needs the number of steps (use EnzymeCkptStoreAll "
                     "for a while loop)");
  if (slots < 1)
    pyzyme_ckpt_fail("EnzymeCkptRevolve needs config.snapshots >= 1");
  if (nsteps > 0) {
    pyzyme_ckpt_push(s, ENZYME_CKPT_STORE, 0, 0, 0);
    pyzyme_ckpt_binomial(s, 0, nsteps, 0, slots - 1, 1, 1);
  }
  pyzyme_ckpt_push(s, ENZYME_CKPT_DONE, 0, 0, -1);
  return s;
}

/* Segment k of `segments` over n steps: [start(k), start(k + 1)). */
static inline int64_t pyzyme_ckpt_segment(int64_t n, int64_t segments, int64_t k) {
  return k * n / segments;
}

/* Reverse [a, b), the state before a being in slot k (here: the current state too): store
 * the state before each step of the segment, in slots `inner` on, then reverse from those. */
static inline void pyzyme_ckpt_queue_segment(pyzyme_ckpt_state *s, int64_t a, int64_t b,
                                             int64_t k, int64_t inner, int first) {
  int64_t j;
#define PYZYME_CKPT_SLOT(j) ((j) == a ? k : inner + (j) - a - 1)
  if (!first)
    pyzyme_ckpt_push(s, ENZYME_CKPT_RESTORE, a, a, k);
  for (j = a; j < b - 1; j++) {
    if (j > a)
      pyzyme_ckpt_push(s, ENZYME_CKPT_STORE, j, j, PYZYME_CKPT_SLOT(j));
    pyzyme_ckpt_push(s, ENZYME_CKPT_FORWARD, j + 1, j, PYZYME_CKPT_SLOT(j));
  }
  pyzyme_ckpt_push(s, first ? ENZYME_CKPT_FIRSTUTURN : ENZYME_CKPT_UTURN, b, b - 1,
                   PYZYME_CKPT_SLOT(b - 1));
  for (j = b - 2; j >= a; j--) {
    pyzyme_ckpt_push(s, ENZYME_CKPT_RESTORE, j, j, PYZYME_CKPT_SLOT(j));
    pyzyme_ckpt_push(s, ENZYME_CKPT_UTURN, j + 1, j, PYZYME_CKPT_SLOT(j));
  }
#undef PYZYME_CKPT_SLOT
}

static inline void *pyzyme_ckpt_segments_init(void *data, int64_t n, uint64_t bytes,
                                              int64_t segments) {
  pyzyme_ckpt_state *s = pyzyme_ckpt_new(data, n, bytes);
  int64_t k;
  if (segments > n)
    segments = n;
  if (segments < 1)
    segments = 1;
  if (n > 0) {
    for (k = 0; k < segments; k++) {
      int64_t a = pyzyme_ckpt_segment(n, segments, k);
      pyzyme_ckpt_push(s, ENZYME_CKPT_STORE, a, a, k);
      if (k + 1 < segments)
        pyzyme_ckpt_push(s, ENZYME_CKPT_FORWARD, pyzyme_ckpt_segment(n, segments, k + 1), a, k);
    }
    for (k = segments - 1; k >= 0; k--)
      pyzyme_ckpt_queue_segment(s, pyzyme_ckpt_segment(n, segments, k),
                                pyzyme_ckpt_segment(n, segments, k + 1), k, segments,
                                k == segments - 1);
  }
  pyzyme_ckpt_push(s, ENZYME_CKPT_DONE, 0, 0, -1);
  return s;
}

static inline void *pyzyme_ckpt_periodic_init(void *data, int64_t nsteps, uint64_t bytes) {
  const EnzymeCkptConfig *config = (const EnzymeCkptConfig *)data;
  if (nsteps < 0)
    pyzyme_ckpt_fail("EnzymeCkptPeriodic needs the number of steps (use EnzymeCkptStoreAll "
                     "for a while loop)");
  return pyzyme_ckpt_segments_init(data, nsteps, bytes, config ? config->snapshots : 1);
}

static inline void *pyzyme_ckpt_store_all_init(void *data, int64_t nsteps, uint64_t bytes) {
  pyzyme_ckpt_state *s;
  if (nsteps >= 0)
    return pyzyme_ckpt_segments_init(data, nsteps, bytes, 1);
  s = pyzyme_ckpt_new(data, nsteps, bytes);
  s->online = 1; /* a while loop: STORE j, FORWARD j+1, ... until set_nsteps */
  return s;
}

/* A while loop ended after n steps, the state before each in slot j. */
static inline void pyzyme_ckpt_store_all_set_nsteps(void *state, int64_t n) {
  pyzyme_ckpt_state *s = (pyzyme_ckpt_state *)state;
  int64_t j;
  s->online = 0;
  s->steps = n;
  s->qlen = s->qpos = 0;
  if (n > 0) {
    pyzyme_ckpt_push(s, ENZYME_CKPT_RESTORE, n - 1, n - 1, n - 1);
    pyzyme_ckpt_push(s, ENZYME_CKPT_FIRSTUTURN, n, n - 1, n - 1);
  }
  for (j = n - 2; j >= 0; j--) {
    pyzyme_ckpt_push(s, ENZYME_CKPT_RESTORE, j, j, j);
    pyzyme_ckpt_push(s, ENZYME_CKPT_UTURN, j + 1, j, j);
  }
  pyzyme_ckpt_push(s, ENZYME_CKPT_DONE, 0, 0, -1);
}

static inline const char *pyzyme_ckpt_name(int32_t flag) {
  static const char *names[] = {"none", "store", "restore", "forward",
                                "firstuturn", "uturn", "error", "done"};
  return flag >= 0 && flag <= 7 ? names[flag] : "error";
}

static inline void pyzyme_ckpt_next(void *state, EnzymeCkptAction *out) {
  pyzyme_ckpt_state *s = (pyzyme_ckpt_state *)state;
  if (s->online) {
    int64_t j = s->qpos / 2; /* STORE j, then FORWARD to j + 1 */
    out->flag = s->qpos % 2 ? ENZYME_CKPT_FORWARD : ENZYME_CKPT_STORE;
    out->startiteration = j;
    out->iteration = s->qpos % 2 ? j + 1 : j;
    out->cpnum = j;
    s->qpos++;
  } else if (s->qpos < s->qlen) {
    *out = s->queue[s->qpos++];
  } else {
    out->flag = ENZYME_CKPT_DONE;
    out->iteration = out->startiteration = 0;
    out->cpnum = -1;
  }
  if (out->flag == ENZYME_CKPT_FORWARD)
    s->stats.forward_steps += out->iteration - out->startiteration;
  if (out->flag == ENZYME_CKPT_FIRSTUTURN || out->flag == ENZYME_CKPT_UTURN)
    s->stats.taped_steps++;
  if (s->config && s->config->verbose > 1)
    fprintf(stderr, "enzyme checkpoint: %s %lld %lld %lld\n", pyzyme_ckpt_name(out->flag),
            (long long)out->startiteration, (long long)out->iteration,
            (long long)out->cpnum);
}

static inline void pyzyme_ckpt_store(void *state, int64_t slot, int64_t step,
                                     const EnzymeCkptRegion *regions, uint64_t nregions) {
  pyzyme_ckpt_state *s = (pyzyme_ckpt_state *)state;
  int64_t idx = slot + 2;
  uint64_t r, off = 0;
  (void)step;
  if (slot < -2)
    pyzyme_ckpt_fail("store into a negative slot");
  if (idx >= s->nslots) {
    int64_t n = s->nslots ? 2 * s->nslots : 8, k;
    while (n <= idx)
      n *= 2;
    s->slots = (void **)realloc(s->slots, n * sizeof(void *));
    if (!s->slots)
      pyzyme_ckpt_fail("out of memory for the slots");
    for (k = s->nslots; k < n; k++)
      s->slots[k] = NULL;
    s->nslots = n;
  }
  if (!s->slots[idx]) {
    s->slots[idx] = malloc(s->bytes ? s->bytes : 1);
    if (!s->slots[idx])
      pyzyme_ckpt_fail("out of memory for a snapshot");
    if (slot >= 0 && ++s->held > s->stats.max_slots) {
      s->stats.max_slots = s->held;
      s->stats.max_bytes = (uint64_t)s->held * s->bytes;
    }
  }
  for (r = 0; r < nregions; r++) {
    if (regions[r].addrspace)
      pyzyme_ckpt_fail("snapshots of device memory are not supported");
    memcpy((char *)s->slots[idx] + off, regions[r].ptr, regions[r].bytes);
    off += regions[r].bytes;
  }
  if (slot >= 0)
    s->stats.stores++;
}

static inline void pyzyme_ckpt_restore(void *state, int64_t slot, int64_t step,
                                       const EnzymeCkptRegion *regions, uint64_t nregions) {
  pyzyme_ckpt_state *s = (pyzyme_ckpt_state *)state;
  int64_t idx = slot + 2;
  uint64_t r, off = 0;
  (void)step;
  if (slot < -2 || idx >= s->nslots || !s->slots[idx])
    pyzyme_ckpt_fail("restore of a slot that holds no snapshot");
  for (r = 0; r < nregions; r++) {
    memcpy(regions[r].ptr, (char *)s->slots[idx] + off, regions[r].bytes);
    off += regions[r].bytes;
  }
  if (slot >= 0)
    s->stats.restores++;
}

static inline void pyzyme_ckpt_finalize(void *state) {
  pyzyme_ckpt_state *s = (pyzyme_ckpt_state *)state;
  int64_t k;
  if (s->config && s->config->verbose > 0)
    fprintf(stderr, "enzyme checkpoint: %lld forward steps, %lld taped, %lld stores, "
                    "%lld restores, %lld slots (%llu bytes)\n",
            (long long)s->stats.forward_steps, (long long)s->stats.taped_steps,
            (long long)s->stats.stores, (long long)s->stats.restores,
            (long long)s->stats.max_slots, (unsigned long long)s->stats.max_bytes);
  if (s->config && s->config->stats)
    *s->config->stats = s->stats;
  for (k = 0; k < s->nslots; k++)
    free(s->slots[k]);
  free(s->slots);
  free(s->queue);
  free(s);
}

static const EnzymeCheckpointScheme EnzymeCkptRevolve = {
    ENZYME_CKPT_ABI_VERSION, pyzyme_ckpt_revolve_init, pyzyme_ckpt_next, pyzyme_ckpt_store,
    pyzyme_ckpt_restore, NULL, pyzyme_ckpt_finalize, NULL, NULL, NULL};
static const EnzymeCheckpointScheme EnzymeCkptPeriodic = {
    ENZYME_CKPT_ABI_VERSION, pyzyme_ckpt_periodic_init, pyzyme_ckpt_next, pyzyme_ckpt_store,
    pyzyme_ckpt_restore, NULL, pyzyme_ckpt_finalize, NULL, NULL, NULL};
static const EnzymeCheckpointScheme EnzymeCkptStoreAll = {
    ENZYME_CKPT_ABI_VERSION, pyzyme_ckpt_store_all_init, pyzyme_ckpt_next, pyzyme_ckpt_store,
    pyzyme_ckpt_restore, pyzyme_ckpt_store_all_set_nsteps, pyzyme_ckpt_finalize, NULL, NULL,
    NULL};

/* The scheme of a loop annotated #pragma enzyme checkpoint("binomial", 2) (or with Enzyme's
 * attributes), which `pyzyme cc` runs as __enzyme_checkpoint_for: 1 periodic, 2 binomial,
 * 3 store-all. Kept (used) so that annotated loops in this file find it; weak, so that every
 * file may include this header. */
__attribute__((weak, used)) const EnzymeCheckpointScheme *pyzyme_checkpoint_scheme(int id) {
  return id == 1 ? &EnzymeCkptPeriodic : id == 3 ? &EnzymeCkptStoreAll : &EnzymeCkptRevolve;
}

#ifdef __cplusplus
}
#endif

#endif
