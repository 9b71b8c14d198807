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
 *     __enzyme_checkpoint_while((void *)step, markers..., args...);
 *
 * runs `i = 0; while (step(i++, args...));` (the step returns an int: nonzero to go on). The
 * scheme's init is told nsteps = -1; until a step returns false it may ask only for STORE and
 * FORWARD (the driver stops a FORWARD at the step that ends the loop), and then, told the
 * number of steps by set_nsteps, goes on to its first turn (EnzymeCkptStoreAll does; the
 * other schemes need the number of steps).
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
 *   EnzymeCkptStoreAll  a snapshot before every step; also for while loops
 *   EnzymeCkptBinomial  Enzyme-MLIR's binomial schedule with config.snapshots slots, action
 *                       for action (for comparisons with it: Revolve runs fewer steps)
 *
 * Their snapshots are kept in memory, or, with config.spill_dir, those of the slots past
 * config.mem_budget bytes in files in that directory (removed when the schedule ends).
 */
#ifndef PYZYME_ENZYME_CHECKPOINT_H
#define PYZYME_ENZYME_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <enzyme/checkpoint_schedule.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ENZYME_CKPT_ABI_VERSION 1

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
  int64_t named; /* one more than the highest slot the queued actions name */
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
  if ((flag == ENZYME_CKPT_STORE || flag == ENZYME_CKPT_RESTORE) && cpnum >= s->named)
    s->named = cpnum + 1;
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

/* Enzyme-MLIR's binomial schedule, action for action: a stack of slots, each advance
 * enzyme_ckpt_binomial_progress(steps left, slots left). The forward sweep places every slot;
 * each step is then reversed from the topmost slot before it, replaying from there and
 * placing slots on the way. Enzyme-MLIR replays the last slot's segment to the last step
 * before reversing it, which the driver's slot -2 makes unneeded; it is replayed all the
 * same, so that the steps run forward are Enzyme-MLIR's (less the one the first turn runs).
 * EnzymeCkptRevolve runs fewer. */
static inline void *pyzyme_ckpt_binomial_init(void *data, int64_t n, uint64_t bytes) {
  pyzyme_ckpt_state *s = pyzyme_ckpt_new(data, n, bytes);
  int64_t budget = s->config ? s->config->snapshots : 0, slots, k, pos = 0, top = 1, cur;
  int64_t *slot;
  if (n < 0)
    pyzyme_ckpt_fail("EnzymeCkptBinomial needs the number of steps (use EnzymeCkptStoreAll "
                     "for a while loop)");
  if (n == 0) {
    pyzyme_ckpt_push(s, ENZYME_CKPT_DONE, 0, 0, -1);
    return s;
  }
  slots = enzyme_ckpt_binomial_slots(n, budget);
  slot = (int64_t *)malloc((size_t)slots * sizeof(int64_t));
  if (!slot)
    pyzyme_ckpt_fail("out of memory for the schedule");
  for (k = 0; k < slots; k++) {
    int64_t left = slots - k < n - pos ? slots - k : n - pos;
    int64_t next = pos + enzyme_ckpt_binomial_progress(n - pos, left);
    slot[k] = pos;
    pyzyme_ckpt_push(s, ENZYME_CKPT_STORE, pos, pos, k);
    if (next == n) { /* the last slot: on to the first turn */
      pyzyme_ckpt_push(s, ENZYME_CKPT_FORWARD, n - 1, pos, k);
      pyzyme_ckpt_push(s, ENZYME_CKPT_FIRSTUTURN, n, n - 1, k);
      top = k + 1;
      break;
    }
    pyzyme_ckpt_push(s, ENZYME_CKPT_FORWARD, next, pos, k);
    pos = next;
  }
  for (cur = n; cur >= 1; cur--) {
    /* Reverse step cur - 1 from the topmost slot (step n - 1 was the first turn's). */
    int64_t a = top - 1;
    pos = slot[a];
    if (pos + 1 < cur || cur < n)
      pyzyme_ckpt_push(s, ENZYME_CKPT_RESTORE, pos, pos, a);
    while (pos + 1 < cur) {
      int64_t left = slots - a < cur - pos ? slots - a : cur - pos;
      int64_t next = pos + enzyme_ckpt_binomial_progress(cur - pos, left);
      if (a > top - 1) {
        slot[a] = pos;
        pyzyme_ckpt_push(s, ENZYME_CKPT_STORE, pos, pos, a);
      }
      pyzyme_ckpt_push(s, ENZYME_CKPT_FORWARD, next < cur ? next : cur - 1, pos, a);
      pos = next;
      a++;
    }
    top = a;
    if (cur < n)
      pyzyme_ckpt_push(s, ENZYME_CKPT_UTURN, cur, cur - 1, a - 1);
  }
  free(slot);
  pyzyme_ckpt_push(s, ENZYME_CKPT_DONE, 0, 0, -1);
  return s;
}

/* Reverse [a, b), the state before a being in slot k (here: the current state too): store
 * the state before each step of the segment, in slots `first_free` on, then reverse from
 * those. */
static inline void pyzyme_ckpt_queue_segment(pyzyme_ckpt_state *s, int64_t a, int64_t b,
                                             int64_t k, int64_t first_free, int first) {
  int64_t j;
#define PYZYME_CKPT_SLOT(j) ((j) == a ? k : first_free + (j) - a - 1)
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

/* Segments of `inner` steps over n steps (the last may be shorter): the forward sweep stores
 * the start of each (segment k in slot k); each is reversed from the state before every one
 * of its steps. */
static inline void *pyzyme_ckpt_segments_init(void *data, int64_t n, uint64_t bytes,
                                              int64_t inner) {
  pyzyme_ckpt_state *s = pyzyme_ckpt_new(data, n, bytes);
  int64_t k, segments;
  if (inner < 1)
    inner = 1;
  segments = n > 0 ? (n + inner - 1) / inner : 0;
  for (k = 0; k < segments; k++) {
    int64_t a = k * inner, b = a + inner < n ? a + inner : n;
    pyzyme_ckpt_push(s, ENZYME_CKPT_STORE, a, a, k);
    if (k + 1 < segments)
      pyzyme_ckpt_push(s, ENZYME_CKPT_FORWARD, b, a, k);
  }
  for (k = segments - 1; k >= 0; k--) {
    int64_t a = k * inner, b = a + inner < n ? a + inner : n;
    pyzyme_ckpt_queue_segment(s, a, b, k, segments, k == segments - 1);
  }
  pyzyme_ckpt_push(s, ENZYME_CKPT_DONE, 0, 0, -1);
  return s;
}

static inline void *pyzyme_ckpt_periodic_init(void *data, int64_t nsteps, uint64_t bytes) {
  const EnzymeCkptConfig *config = (const EnzymeCkptConfig *)data;
  if (nsteps < 0)
    pyzyme_ckpt_fail("EnzymeCkptPeriodic needs the number of steps (use EnzymeCkptStoreAll "
                     "for a while loop)");
  return pyzyme_ckpt_segments_init(
      data, nsteps, bytes,
      pyzyme_ckpt_periodic_inner(nsteps, config ? config->snapshots : 1));
}

static inline void *pyzyme_ckpt_store_all_init(void *data, int64_t nsteps, uint64_t bytes) {
  pyzyme_ckpt_state *s;
  if (nsteps >= 0)
    return pyzyme_ckpt_segments_init(data, nsteps, bytes, nsteps);
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

/* Whether slot index idx (slot + 2) is kept in a file: with config.spill_dir, the slots
 * that start past config.mem_budget bytes of snapshots. */
static inline int pyzyme_ckpt_spilled(const pyzyme_ckpt_state *s, int64_t idx) {
  return s->config && s->config->spill_dir &&
         (uint64_t)idx * s->bytes >= s->config->mem_budget;
}

static inline void pyzyme_ckpt_path(const pyzyme_ckpt_state *s, int64_t idx, char *buf,
                                    size_t len) {
  if (snprintf(buf, len, "%s/pyzyme_ckpt_%p_%lld.bin", s->config->spill_dir, (const void *)s,
               (long long)idx) >= (int)len)
    pyzyme_ckpt_fail("the path of a snapshot file is too long");
}

/* A snapshot's bytes, in memory or in its file. */
static inline void pyzyme_ckpt_copy(pyzyme_ckpt_state *s, int64_t idx,
                                    const EnzymeCkptRegion *regions, uint64_t nregions,
                                    int out) {
  uint64_t r, off = 0;
  FILE *f = NULL;
  if (pyzyme_ckpt_spilled(s, idx)) {
    char path[4096];
    pyzyme_ckpt_path(s, idx, path, sizeof(path));
    f = fopen(path, out ? "wb" : "rb");
    if (!f)
      pyzyme_ckpt_fail(out ? "cannot write a snapshot file in config.spill_dir"
                           : "cannot read a snapshot file back");
  }
  for (r = 0; r < nregions; r++) {
    if (regions[r].addrspace)
      pyzyme_ckpt_fail("snapshots of device memory are not supported");
    if (f && (out ? fwrite(regions[r].ptr, 1, regions[r].bytes, f)
                  : fread(regions[r].ptr, 1, regions[r].bytes, f)) != regions[r].bytes)
      pyzyme_ckpt_fail(out ? "short write to a snapshot file" : "short snapshot file");
    if (!f && out)
      memcpy((char *)s->slots[idx] + off, regions[r].ptr, regions[r].bytes);
    if (!f && !out)
      memcpy(regions[r].ptr, (char *)s->slots[idx] + off, regions[r].bytes);
    off += regions[r].bytes;
  }
  if (f && fclose(f) != 0)
    pyzyme_ckpt_fail("cannot close a snapshot file");
}

static inline void pyzyme_ckpt_store(void *state, int64_t slot, int64_t step,
                                     const EnzymeCkptRegion *regions, uint64_t nregions) {
  pyzyme_ckpt_state *s = (pyzyme_ckpt_state *)state;
  int64_t idx = slot + 2;
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
    /* A slot in a file holds a buffer of one byte: it is taken. */
    s->slots[idx] = malloc(s->bytes && !pyzyme_ckpt_spilled(s, idx) ? s->bytes : 1);
    if (!s->slots[idx])
      pyzyme_ckpt_fail("out of memory for a snapshot");
    if (slot >= 0 && ++s->held > s->stats.max_slots) {
      s->stats.max_slots = s->held;
      s->stats.max_bytes = (uint64_t)s->held * s->bytes;
    }
  }
  pyzyme_ckpt_copy(s, idx, regions, nregions, 1);
  if (slot >= 0)
    s->stats.stores++;
}

static inline void pyzyme_ckpt_restore(void *state, int64_t slot, int64_t step,
                                       const EnzymeCkptRegion *regions, uint64_t nregions) {
  pyzyme_ckpt_state *s = (pyzyme_ckpt_state *)state;
  int64_t idx = slot + 2;
  (void)step;
  if (slot < -2 || idx >= s->nslots || !s->slots[idx])
    pyzyme_ckpt_fail("restore of a slot that holds no snapshot");
  pyzyme_ckpt_copy(s, idx, regions, nregions, 0);
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
  for (k = 0; k < s->nslots; k++) {
    if (s->slots[k] && pyzyme_ckpt_spilled(s, k)) {
      char path[4096];
      pyzyme_ckpt_path(s, k, path, sizeof(path));
      remove(path);
    }
    free(s->slots[k]);
  }
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
static const EnzymeCheckpointScheme EnzymeCkptBinomial = {
    ENZYME_CKPT_ABI_VERSION, pyzyme_ckpt_binomial_init, pyzyme_ckpt_next, pyzyme_ckpt_store,
    pyzyme_ckpt_restore, NULL, pyzyme_ckpt_finalize, NULL, NULL, NULL};
static const EnzymeCheckpointScheme EnzymeCkptStoreAll = {
    ENZYME_CKPT_ABI_VERSION, pyzyme_ckpt_store_all_init, pyzyme_ckpt_next, pyzyme_ckpt_store,
    pyzyme_ckpt_restore, pyzyme_ckpt_store_all_set_nsteps, pyzyme_ckpt_finalize, NULL, NULL,
    NULL};

/* -- A schedule without a driver -----------------------------------------------------------
 *
 * For a program that keeps its snapshots itself and needs only the actions:
 *
 *   void *h = __enzyme_ckpt_schedule_begin(mode, budget, nsteps);
 *   while (__enzyme_ckpt_schedule_next(h) != ENZYME_CKPT_DONE)
 *     ... __enzyme_ckpt_schedule_iteration(h), _start(h), _slot(h) ...
 *   __enzyme_ckpt_schedule_end(h);
 *
 * mode is an ENZYME_CKPT_SCHEDULE_* (periodic, revolve, store-all, binomial); a budget below 1
 * asks for floor(sqrt(nsteps)) (at least 1). The scheme's store and restore are not called:
 * the caller saves and loads slot _slot(h) itself, slots 0 to __enzyme_ckpt_schedule_slots(h)
 * - 1. Defined where ENZYME_CHECKPOINT_RUNTIME is, weak, so several files may define them;
 * ENZYME_CKPT_VERBOSE=1 (or 2) in the environment prints a summary (and every action). */
void *__enzyme_ckpt_schedule_begin(int64_t mode, int64_t budget, int64_t nsteps);
int32_t __enzyme_ckpt_schedule_next(void *h);
int32_t __enzyme_ckpt_schedule_flag(void *h);
int64_t __enzyme_ckpt_schedule_iteration(void *h);
int64_t __enzyme_ckpt_schedule_start(void *h);
int64_t __enzyme_ckpt_schedule_slot(void *h);
int64_t __enzyme_ckpt_schedule_slots(void *h);
void __enzyme_ckpt_schedule_end(void *h);

#ifdef ENZYME_CHECKPOINT_RUNTIME
typedef struct pyzyme_ckpt_schedule {
  const EnzymeCheckpointScheme *scheme;
  pyzyme_ckpt_state *state;
  EnzymeCkptConfig config;
  EnzymeCkptAction action;
  EnzymeCkptStats stats;
} pyzyme_ckpt_schedule;

__attribute__((weak)) void *__enzyme_ckpt_schedule_begin(int64_t mode, int64_t budget,
                                                          int64_t nsteps) {
  pyzyme_ckpt_schedule *h;
  const char *verbose = getenv("ENZYME_CKPT_VERBOSE");
  if (nsteps < 0)
    pyzyme_ckpt_fail("a schedule without a driver needs the number of steps");
  h = (pyzyme_ckpt_schedule *)calloc(1, sizeof(pyzyme_ckpt_schedule));
  if (!h)
    pyzyme_ckpt_fail("out of memory");
  if (budget < 1)
    budget = enzyme_ckpt_isqrt(nsteps) > 1 ? enzyme_ckpt_isqrt(nsteps) : 1;
  h->config.snapshots = budget;
  h->config.verbose = verbose ? atoi(verbose) : 0;
  h->config.stats = &h->stats;
  h->scheme = mode == ENZYME_CKPT_SCHEDULE_PERIODIC    ? &EnzymeCkptPeriodic
              : mode == ENZYME_CKPT_SCHEDULE_REVOLVE   ? &EnzymeCkptRevolve
              : mode == ENZYME_CKPT_SCHEDULE_STORE_ALL ? &EnzymeCkptStoreAll
              : mode == ENZYME_CKPT_SCHEDULE_BINOMIAL  ? &EnzymeCkptBinomial
                                                       : NULL;
  if (!h->scheme)
    pyzyme_ckpt_fail("unknown schedule for __enzyme_ckpt_schedule_begin");
  h->state = (pyzyme_ckpt_state *)h->scheme->init(&h->config, nsteps, 0);
  h->action.flag = ENZYME_CKPT_NONE;
  return h;
}

__attribute__((weak)) int32_t __enzyme_ckpt_schedule_next(void *h) {
  pyzyme_ckpt_schedule *s = (pyzyme_ckpt_schedule *)h;
  s->scheme->next_action(s->state, &s->action);
  return s->action.flag;
}

__attribute__((weak)) int32_t __enzyme_ckpt_schedule_flag(void *h) {
  return ((pyzyme_ckpt_schedule *)h)->action.flag;
}

__attribute__((weak)) int64_t __enzyme_ckpt_schedule_iteration(void *h) {
  return ((pyzyme_ckpt_schedule *)h)->action.iteration;
}

__attribute__((weak)) int64_t __enzyme_ckpt_schedule_start(void *h) {
  return ((pyzyme_ckpt_schedule *)h)->action.startiteration;
}

__attribute__((weak)) int64_t __enzyme_ckpt_schedule_slot(void *h) {
  return ((pyzyme_ckpt_schedule *)h)->action.cpnum;
}

__attribute__((weak)) int64_t __enzyme_ckpt_schedule_slots(void *h) {
  return ((pyzyme_ckpt_schedule *)h)->state->named;
}

__attribute__((weak)) void __enzyme_ckpt_schedule_end(void *h) {
  pyzyme_ckpt_schedule *s = (pyzyme_ckpt_schedule *)h;
  s->scheme->finalize(s->state);
  free(s);
}
#endif

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
