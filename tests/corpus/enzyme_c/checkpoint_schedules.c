// The schedule arithmetic of <enzyme/checkpoint.h> and <enzyme/checkpoint_schedule.h>, without
// AD: the binomial advance attains the least number of repetitions, the periodic split covers
// the loop in at most `budget` segments, and every scheme (Revolve, Periodic, StoreAll,
// Binomial), replayed on a model of the driver, stores the state it names, runs forward from
// where the state is, turns at the step before the one last reversed (the last step first) and
// holds no more slots than it may; the schedule without a driver gives the same actions; slots
// past config.mem_budget go to files in config.spill_dir, which are gone when it ends.
#define _DEFAULT_SOURCE
#define ENZYME_CHECKPOINT_RUNTIME
#include <dirent.h>
#include <enzyme/checkpoint.h>
#include <unistd.h>
#include "test_utils.h"

// C(s + t, t) as a double.
static double choose(int64_t s, int64_t t) {
  double c = 1;
  for (int64_t k = 1; k <= t; k++) c = c * (double)(s + k) / (double)k;
  return c;
}

typedef struct {
  int64_t forward, stores, turns, max_slot;
} Replay;

// The actions of `next` (on `st`) against a model of the driver: `state` is the step the
// state is before, slot[k] the step slot k holds. With `replays`, forward steps may reach the
// step last reversed (Binomial replays Enzyme-MLIR's segment to the first turn).
static Replay replay(void (*next)(void *, EnzymeCkptAction *), void *st, int64_t n,
                     int replays) {
  Replay r = {0, 0, 0, -1};
  int64_t state = 0, todo = n, slot[256];
  EnzymeCkptAction a;
  for (int k = 0; k < 256; k++) slot[k] = -1;
  for (int guard = 0; guard < 100000; guard++) {
    next(st, &a);
    if (a.flag == ENZYME_CKPT_DONE) break;
    if (a.flag == ENZYME_CKPT_STORE || a.flag == ENZYME_CKPT_RESTORE) {
      if (a.cpnum < 0 || a.cpnum >= 256) {
        APPROX_EQ(a.cpnum, 0, 0);
        break;
      }
      if (a.cpnum > r.max_slot) r.max_slot = a.cpnum;
    }
    switch (a.flag) {
    case ENZYME_CKPT_STORE:
      APPROX_EQ(a.iteration, state, 0);
      slot[a.cpnum] = state;
      r.stores++;
      break;
    case ENZYME_CKPT_RESTORE:
      APPROX_EQ(slot[a.cpnum] >= 0, 1, 0);
      APPROX_EQ(a.iteration, slot[a.cpnum], 0);
      state = slot[a.cpnum];
      break;
    case ENZYME_CKPT_FORWARD:
      APPROX_EQ(a.startiteration, state, 0);
      APPROX_EQ(a.iteration > a.startiteration && a.iteration < todo + replays, 1, 0);
      r.forward += a.iteration - a.startiteration;
      state = a.iteration;
      break;
    case ENZYME_CKPT_FIRSTUTURN:
    case ENZYME_CKPT_UTURN:
      APPROX_EQ(a.flag == ENZYME_CKPT_FIRSTUTURN, todo == n, 0);
      APPROX_EQ(a.iteration, todo, 0);
      APPROX_EQ(state, todo - 1, 0);
      todo--;
      r.turns++;
      break;
    default:
      APPROX_EQ(a.flag, ENZYME_CKPT_DONE, 0);
      return r;
    }
  }
  APPROX_EQ(todo, 0, 0);
  return r;
}

static void next_of(void *h, EnzymeCkptAction *a) {
  // The schedule without a driver, seen through its accessors.
  a->flag = __enzyme_ckpt_schedule_next(h);
  APPROX_EQ(__enzyme_ckpt_schedule_flag(h), a->flag, 0);
  a->iteration = __enzyme_ckpt_schedule_iteration(h);
  a->startiteration = __enzyme_ckpt_schedule_start(h);
  a->cpnum = __enzyme_ckpt_schedule_slot(h);
}

static int files_in(const char *dir) {
  int count = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') count++;
  closedir(d);
  return count;
}

int main(void) {
  // floor(sqrt(n)).
  for (int64_t n = 0; n < 5000; n++) {
    int64_t r = enzyme_ckpt_isqrt(n);
    APPROX_EQ(r * r <= n && (r + 1) * (r + 1) > n, 1, 0);
  }
  APPROX_EQ(enzyme_ckpt_isqrt(-4), 0, 0);
  APPROX_EQ(enzyme_ckpt_isqrt(INT64_MAX), 3037000499.0, 0);
  // The binomial advance p from n steps with s slots: with t the least repetitions for which
  // C(s + t, t) >= n, [0, p) is reversible with s slots in t - 1 repetitions and [p, n) with
  // s - 1 in t; one step is left for each other slot; with one slot, p = n.
  for (int64_t n = 1; n <= 120; n++)
    for (int64_t s = 1; s <= 9; s++) {
      int64_t p = enzyme_ckpt_binomial_progress(n, s), t = 0;
      while (choose(s, t) < (double)n) t++;
      if (s == 1 || n == 1) {
        APPROX_EQ(p, n, 0);
        continue;
      }
      APPROX_EQ(p >= 1 && p <= n - 1 && (s > n || p <= n - (s - 1)), 1, 0);
      if (n - (s - 1) >= n - choose(s - 1, t))
        APPROX_EQ((double)(n - p) <= choose(s - 1, t) && (double)p <= choose(s, t - 1), 1, 0);
    }
  APPROX_EQ(enzyme_ckpt_binomial_progress(0, 3), 0, 0);
  APPROX_EQ(enzyme_ckpt_binomial_slots(100, 0), 10, 0);
  APPROX_EQ(enzyme_ckpt_binomial_slots(2, 0), 2, 0);
  APPROX_EQ(enzyme_ckpt_binomial_slots(3, 7), 3, 0);
  // The periodic split.
  for (int64_t n = 1; n <= 100; n++)
    for (int64_t b = 0; b <= 12; b++) {
      EnzymeCkptPeriodicSplit s = enzyme_ckpt_periodic_split(n, b);
      int64_t segs = enzyme_ckpt_periodic_segments(s), covered = 0;
      for (int64_t k = 0; k < segs; k++) {
        APPROX_EQ(enzyme_ckpt_periodic_start(s, k), covered, 0);
        covered += enzyme_ckpt_periodic_length(s, k);
      }
      APPROX_EQ(covered, n, 0);
      APPROX_EQ(s.trailing < s.inner, 1, 0);
      if (b > 0) {
        APPROX_EQ(segs <= b, 1, 0);
        APPROX_EQ(s.inner, (n + b - 1) / b, 0);
      } else {
        APPROX_EQ(s.inner, enzyme_ckpt_isqrt(n), 0);
      }
    }
  // Names.
  APPROX_EQ(enzyme_ckpt_schedule_from_name("regular", 7), ENZYME_CKPT_SCHEDULE_PERIODIC, 0);
  APPROX_EQ(enzyme_ckpt_schedule_from_name("binomial!", 8), ENZYME_CKPT_SCHEDULE_BINOMIAL, 0);
  APPROX_EQ(enzyme_ckpt_schedule_from_name("store", 5), -1, 0);
  APPROX_EQ(enzyme_ckpt_schedule_from_name("none", 5), -1, 0);

  // Every scheme on the model of the driver.
  const EnzymeCheckpointScheme *schemes[] = {&EnzymeCkptRevolve, &EnzymeCkptPeriodic,
                                             &EnzymeCkptStoreAll, &EnzymeCkptBinomial};
  for (int64_t n = 0; n <= 45; n++)
    for (int64_t b = 1; b <= 6; b++) {
      int64_t revolve_forward = 0;
      for (int s = 0; s < 4; s++) {
        EnzymeCkptStats stats;
        EnzymeCkptConfig config = {b, 0, NULL, 0, &stats};
        void *st = schemes[s]->init(&config, n, 0);
        Replay r = replay(schemes[s]->next_action, st, n, s == 3);
        schemes[s]->finalize(st);
        APPROX_EQ(r.turns, n, 0);
        APPROX_EQ(stats.taped_steps, n, 0);
        APPROX_EQ(stats.forward_steps, r.forward, 0);
        if (s == 0) {
          revolve_forward = r.forward;
          if (n > 1) {
            int64_t t = 0;
            while (choose(b, t) < (double)n) t++;
            APPROX_EQ(r.forward, t * n - choose(b + 1, t - 1), 0);
          }
        }
        if (s == 0 || s == 3) APPROX_EQ(r.max_slot < b, 1, 0);
        if (s == 3) APPROX_EQ(r.forward >= revolve_forward, 1, 0);
        if (s == 2) APPROX_EQ(r.stores, n > 1 ? n - 1 : n, 0); // slot -2 holds the last
        if (s == 1 && n > 0) {
          EnzymeCkptPeriodicSplit sp = enzyme_ckpt_periodic_split(n, b);
          // A slot per segment, and one per step of a segment but its first and last.
          APPROX_EQ(r.max_slot + 1,
                    enzyme_ckpt_periodic_segments(sp) + (sp.inner > 2 ? sp.inner - 2 : 0), 0);
        }
        // The same schedule without a driver: the same actions, slots within its count.
        if (s != 2) {
          static const int64_t modes[] = {ENZYME_CKPT_SCHEDULE_REVOLVE,
                                          ENZYME_CKPT_SCHEDULE_PERIODIC, 0,
                                          ENZYME_CKPT_SCHEDULE_BINOMIAL};
          void *h = __enzyme_ckpt_schedule_begin(modes[s], b, n);
          Replay q = replay(next_of, h, n, s == 3);
          APPROX_EQ(q.forward, r.forward, 0);
          APPROX_EQ(q.stores, r.stores, 0);
          APPROX_EQ(q.max_slot < __enzyme_ckpt_schedule_slots(h), 1, 0);
          __enzyme_ckpt_schedule_end(h);
        }
      }
    }

  // A while loop's store-all: a store before every step until set_nsteps, then the turns.
  {
    EnzymeCkptConfig config = {1, 0, NULL, 0, NULL};
    void *st = EnzymeCkptStoreAll.init(&config, -1, 0);
    EnzymeCkptAction a;
    for (int64_t j = 0; j < 4; j++) {
      EnzymeCkptStoreAll.next_action(st, &a);
      APPROX_EQ(a.flag == ENZYME_CKPT_STORE && a.iteration == j && a.cpnum == j, 1, 0);
      EnzymeCkptStoreAll.next_action(st, &a);
      APPROX_EQ(a.flag == ENZYME_CKPT_FORWARD && a.startiteration == j && a.iteration == j + 1,
                1, 0);
    }
    EnzymeCkptStoreAll.set_nsteps(st, 4);
    EnzymeCkptStoreAll.next_action(st, &a);
    APPROX_EQ(a.flag == ENZYME_CKPT_RESTORE && a.cpnum == 3, 1, 0);
    EnzymeCkptStoreAll.next_action(st, &a);
    APPROX_EQ(a.flag == ENZYME_CKPT_FIRSTUTURN && a.iteration == 4, 1, 0);
    EnzymeCkptStoreAll.finalize(st);
  }

  // Snapshots in files: slots from config.mem_budget bytes on (here two slots of 24 bytes
  // in memory, counting the driver's slots -2 and -1).
  {
    char dir[] = "/tmp/pyzyme_ckpt_testXXXXXX";
    double u[3] = {1, 2, 3}, w = 4;
    EnzymeCkptRegion regions[2] = {{u, sizeof(u), 0, 0}, {&w, sizeof(w), 0, 0}};
    EnzymeCkptStats stats;
    if (!mkdtemp(dir)) {
      APPROX_EQ(0, 1, 0);
      return failures;
    }
    EnzymeCkptConfig config = {3, 0, dir, 2 * 32, &stats};
    void *st = EnzymeCkptRevolve.init(&config, 5, sizeof(u) + sizeof(w));
    for (int k = -2; k < 3; k++) {
      u[0] = 10 * k;
      w = k;
      EnzymeCkptRevolve.store(st, k, 0, regions, 2);
    }
    APPROX_EQ(files_in(dir), 3, 0);
    for (int k = 2; k >= -2; k--) {
      EnzymeCkptRevolve.restore(st, k, 0, regions, 2);
      APPROX_EQ(u[0], 10 * k, 0);
      APPROX_EQ(u[2], 3, 0);
      APPROX_EQ(w, k, 0);
    }
    EnzymeCkptRevolve.finalize(st);
    APPROX_EQ(stats.stores, 3, 0);
    APPROX_EQ(stats.restores, 3, 0);
    APPROX_EQ(files_in(dir), 0, 0);
    rmdir(dir);
  }
  return failures;
}
