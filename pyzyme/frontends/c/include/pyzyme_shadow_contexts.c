/* pyzyme's runtime for Enzyme's shadows of global variables, linked into a program that calls
 * __enzyme_context, __enzyme_shadow or __enzyme_zero_shadows (see
 * pyzyme/frontends/c/shadow_contexts.py, which rewrites those calls into these functions).
 *
 * A context holds, for each object the derivatives reach (a global variable of the program,
 * or a heap block the program allocated), `width` shadows, made the first time they are
 * asked for: zeroed, except that the integers of a global are copied from it and its pointers
 * point to the shadows of what they point to, in the same context and lane. Objects are known
 * from the tables each translation unit hands in (its globals, with where they hold integers
 * and pointers) and from the allocations the program reports (pyzyme instruments its calls of
 * malloc, free, ...). A pointer to anything else gets a null shadow.
 *
 * Every external symbol is weak: each translation unit carries this file, and one copy of
 * its state serves them all. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PZ_WEAK __attribute__((weak))
#define PZ_MAGIC 0x70797a796d654358ull
#define PZ_MAX_DEFAULT_WIDTH 64

/* Where a global holds bytes the shadow copies (integers: kind 0) or a pointer (kind 1):
 * `count` runs of `size` bytes, `stride` apart, from `offset`. The layouts of these three
 * structs are those shadow_contexts.py writes. */
typedef struct {
  int64_t offset, size, count, stride, kind;
} pz_field;

typedef struct {
  char *address;
  int64_t size;
  const char *name;
  const pz_field *fields;
  int64_t nfields;
} pz_global;

typedef struct {
  int64_t n;
  const pz_global *globals;
} pz_table;

typedef struct {
  char *base;
  int64_t size;
  uint64_t serial;
  const pz_global *global; /* NULL for a heap block */
} pz_object;

typedef struct {
  char *base;
  uint64_t serial; /* the object's when the shadows were made; 0: released */
  const pz_global *global;
  int64_t size;
  char **shadows; /* one per lane */
} pz_slot;

typedef struct {
  uint64_t magic;
  int64_t width;
  pz_slot **slots; /* open addressing on the base address */
  int64_t cap, n;
} pz_context;

typedef struct {
  char *base;
  int64_t size;
  uint64_t serial;
} pz_block;

/* The state, shared by every translation unit. */
PZ_WEAK pz_object *__pyzyme_ctx_st_globals;
PZ_WEAK int64_t __pyzyme_ctx_st_nglobals, __pyzyme_ctx_st_capglobals;
PZ_WEAK const pz_table **__pyzyme_ctx_st_tables;
PZ_WEAK int64_t __pyzyme_ctx_st_ntables, __pyzyme_ctx_st_captables;
PZ_WEAK pz_block *__pyzyme_ctx_st_heap; /* open addressing on the base address */
PZ_WEAK int64_t __pyzyme_ctx_st_heapcap, __pyzyme_ctx_st_heapn;
PZ_WEAK pz_context **__pyzyme_ctx_st_contexts;
PZ_WEAK int64_t __pyzyme_ctx_st_ncontexts, __pyzyme_ctx_st_capcontexts;
PZ_WEAK uint64_t __pyzyme_ctx_st_serial;
PZ_WEAK pz_context *__pyzyme_ctx_st_defaults[PZ_MAX_DEFAULT_WIDTH + 1];

__attribute__((noreturn, cold)) static void pz_fail(const char *what, const char *detail) {
  fprintf(stderr, "pyzyme: %s%s\n", what, detail);
  abort();
}

static void *pz_grow(void *items, int64_t *cap, int64_t need, size_t item) {
  if (need <= *cap)
    return items;
  int64_t n = *cap ? *cap : 16;
  while (n < need)
    n *= 2;
  void *out = realloc(items, (size_t)n * item);
  if (!out)
    pz_fail("out of memory for the shadows of global variables", "");
  *cap = n;
  return out;
}

static uint64_t pz_hash(const void *p) {
  uint64_t h = (uint64_t)(uintptr_t)p;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

/* ------------------------------------------------------------------------- known objects */
static void pz_register(const pz_table *t) {
  if (!t)
    return;
  for (int64_t i = 0; i < __pyzyme_ctx_st_ntables; i++)
    if (__pyzyme_ctx_st_tables[i] == t)
      return;
  __pyzyme_ctx_st_tables = pz_grow(__pyzyme_ctx_st_tables, &__pyzyme_ctx_st_captables,
                                   __pyzyme_ctx_st_ntables + 1, sizeof(*__pyzyme_ctx_st_tables));
  __pyzyme_ctx_st_tables[__pyzyme_ctx_st_ntables++] = t;
  for (int64_t i = 0; i < t->n; i++) {
    const pz_global *g = &t->globals[i];
    if (g->size <= 0)
      continue;
    int64_t lo = 0, hi = __pyzyme_ctx_st_nglobals;
    while (lo < hi) { /* the first object at or after g */
      int64_t mid = (lo + hi) / 2;
      if (__pyzyme_ctx_st_globals[mid].base < g->address)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo < __pyzyme_ctx_st_nglobals && __pyzyme_ctx_st_globals[lo].base == g->address)
      continue; /* another unit's table has it */
    __pyzyme_ctx_st_globals =
        pz_grow(__pyzyme_ctx_st_globals, &__pyzyme_ctx_st_capglobals,
                __pyzyme_ctx_st_nglobals + 1, sizeof(*__pyzyme_ctx_st_globals));
    memmove(&__pyzyme_ctx_st_globals[lo + 1], &__pyzyme_ctx_st_globals[lo],
            (size_t)(__pyzyme_ctx_st_nglobals - lo) * sizeof(pz_object));
    __pyzyme_ctx_st_globals[lo] =
        (pz_object){g->address, g->size, ++__pyzyme_ctx_st_serial, g};
    __pyzyme_ctx_st_nglobals++;
  }
}

static pz_block *pz_heap_find(const char *p) {
  if (!__pyzyme_ctx_st_heapcap)
    return NULL;
  int64_t mask = __pyzyme_ctx_st_heapcap - 1;
  for (int64_t i = (int64_t)(pz_hash(p) & (uint64_t)mask);; i = (i + 1) & mask) {
    pz_block *b = &__pyzyme_ctx_st_heap[i];
    if (b->base == p)
      return b;
    if (!b->base)
      return NULL;
  }
}

/* Put e in the table (which has room), replacing the block at the same address. */
static void pz_heap_insert(pz_block e) {
  int64_t mask = __pyzyme_ctx_st_heapcap - 1;
  for (int64_t i = (int64_t)(pz_hash(e.base) & (uint64_t)mask);; i = (i + 1) & mask) {
    pz_block *b = &__pyzyme_ctx_st_heap[i];
    if (!b->base || b->base == e.base) {
      __pyzyme_ctx_st_heapn += !b->base;
      *b = e;
      return;
    }
  }
}

static void pz_heap_put(char *p, int64_t size) {
  if (2 * (__pyzyme_ctx_st_heapn + 1) > __pyzyme_ctx_st_heapcap) {
    pz_block *old = __pyzyme_ctx_st_heap;
    int64_t oldcap = __pyzyme_ctx_st_heapcap;
    int64_t cap = oldcap ? 2 * oldcap : 64;
    __pyzyme_ctx_st_heap = calloc((size_t)cap, sizeof(pz_block));
    if (!__pyzyme_ctx_st_heap)
      pz_fail("out of memory for the shadows of global variables", "");
    __pyzyme_ctx_st_heapcap = cap;
    __pyzyme_ctx_st_heapn = 0;
    for (int64_t i = 0; i < oldcap; i++)
      if (old[i].base)
        pz_heap_insert(old[i]);
    free(old);
  }
  pz_heap_insert((pz_block){p, size, ++__pyzyme_ctx_st_serial});
}

static void pz_heap_remove(char *p) {
  pz_block *b = pz_heap_find(p);
  if (!b)
    return;
  /* Linear probing: the entries of the run after the hole go in again. */
  int64_t mask = __pyzyme_ctx_st_heapcap - 1, hole = b - __pyzyme_ctx_st_heap;
  __pyzyme_ctx_st_heap[hole].base = NULL;
  __pyzyme_ctx_st_heapn--;
  for (int64_t i = (hole + 1) & mask; __pyzyme_ctx_st_heap[i].base; i = (i + 1) & mask) {
    pz_block e = __pyzyme_ctx_st_heap[i];
    __pyzyme_ctx_st_heap[i].base = NULL;
    __pyzyme_ctx_st_heapn--;
    pz_heap_insert(e);
  }
}

/* The object holding p: a global (any byte of it) or a heap block (its start). */
static int pz_find(const char *p, pz_object *out) {
  int64_t lo = 0, hi = __pyzyme_ctx_st_nglobals;
  while (lo < hi) { /* the last object starting at or before p */
    int64_t mid = (lo + hi) / 2;
    if (__pyzyme_ctx_st_globals[mid].base <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo > 0) {
    pz_object *o = &__pyzyme_ctx_st_globals[lo - 1];
    if (p < o->base + o->size) {
      *out = *o;
      return 1;
    }
  }
  pz_block *b = pz_heap_find(p);
  if (b) {
    *out = (pz_object){b->base, b->size, b->serial, NULL};
    return 1;
  }
  return 0;
}

/* ---------------------------------------------------------------------------- contexts */
static pz_context *pz_context_new(int64_t width) {
  if (width < 1)
    pz_fail("__enzyme_context: the width must be at least 1", "");
  pz_context *c = calloc(1, sizeof(pz_context));
  if (!c)
    pz_fail("out of memory for the shadows of global variables", "");
  c->magic = PZ_MAGIC;
  c->width = width;
  __pyzyme_ctx_st_contexts =
      pz_grow(__pyzyme_ctx_st_contexts, &__pyzyme_ctx_st_capcontexts,
              __pyzyme_ctx_st_ncontexts + 1, sizeof(*__pyzyme_ctx_st_contexts));
  __pyzyme_ctx_st_contexts[__pyzyme_ctx_st_ncontexts++] = c;
  return c;
}

static pz_context *pz_context_of(void *ctx, const char *what) {
  pz_context *c = ctx;
  if (!c || c->magic != PZ_MAGIC)
    pz_fail(what, ": this is not a context made by __enzyme_context");
  return c;
}

static pz_slot **pz_slot_at(pz_context *c, const char *base) {
  int64_t mask = c->cap - 1;
  for (int64_t i = (int64_t)(pz_hash(base) & (uint64_t)mask);; i = (i + 1) & mask)
    if (!c->slots[i] || c->slots[i]->base == base)
      return &c->slots[i];
}

static pz_slot *pz_slot_find(pz_context *c, const char *base) {
  return c->cap ? *pz_slot_at(c, base) : NULL;
}

static pz_slot *pz_slot_insert(pz_context *c, char *base) {
  if (2 * (c->n + 1) > c->cap) {
    pz_slot **old = c->slots;
    int64_t oldcap = c->cap;
    c->cap = oldcap ? 2 * oldcap : 32;
    c->slots = calloc((size_t)c->cap, sizeof(pz_slot *));
    if (!c->slots)
      pz_fail("out of memory for the shadows of global variables", "");
    for (int64_t i = 0; i < oldcap; i++)
      if (old[i])
        *pz_slot_at(c, old[i]->base) = old[i];
    free(old);
  }
  pz_slot **at = pz_slot_at(c, base);
  if (!*at) {
    *at = calloc(1, sizeof(pz_slot));
    if (!*at)
      pz_fail("out of memory for the shadows of global variables", "");
    (*at)->base = base;
    c->n++;
  }
  return *at;
}

static void *pz_translate(pz_context *c, char *p, int64_t lane);

/* Each run of `f`, expanded: calls `fn(offset, size)`. */
#define PZ_EACH_RUN(f, off, len, body)                                                       \
  for (int64_t k_ = 0; k_ < (f)->count; k_++) {                                             \
    int64_t off = (f)->offset + k_ * (f)->stride, len = (f)->size;                           \
    body                                                                                    \
  }

/* The pointers of slot s's shadows, as the primal's pointers translate now. */
static void pz_fill_pointers(pz_context *c, pz_slot *s) {
  if (!s->global)
    return;
  for (int64_t j = 0; j < s->global->nfields; j++) {
    const pz_field *f = &s->global->fields[j];
    if (f->kind != 1)
      continue;
    PZ_EACH_RUN(f, off, len, {
      (void)len;
      char *target;
      memcpy(&target, s->base + off, sizeof(target));
      for (int64_t lane = 0; lane < c->width; lane++) {
        void *shadow = pz_translate(c, target, lane);
        memcpy(s->shadows[lane] + off, &shadow, sizeof(shadow));
      }
    })
  }
}

/* The slot of object o in c, its shadows made (zeroed, integers copied, pointers translated)
 * when it has none, or none since the object was allocated again. */
static pz_slot *pz_shadows(pz_context *c, const pz_object *o) {
  pz_slot *s = pz_slot_insert(c, o->base);
  if (s->serial == o->serial)
    return s;
  if (s->shadows) {
    for (int64_t lane = 0; lane < c->width; lane++)
      free(s->shadows[lane]);
    free(s->shadows);
  }
  s->serial = o->serial;
  s->global = o->global;
  s->size = o->size;
  s->shadows = calloc((size_t)c->width, sizeof(char *));
  size_t bytes = ((size_t)o->size + 63) / 64 * 64;
  for (int64_t lane = 0; lane < c->width; lane++) {
    s->shadows[lane] = aligned_alloc(64, bytes);
    if (!s->shadows[lane])
      pz_fail("out of memory for the shadows of global variables", "");
    memset(s->shadows[lane], 0, bytes);
  }
  if (o->global) {
    for (int64_t j = 0; j < o->global->nfields; j++) {
      const pz_field *f = &o->global->fields[j];
      if (f->kind == 0)
        PZ_EACH_RUN(f, off, len, {
          for (int64_t lane = 0; lane < c->width; lane++)
            memcpy(s->shadows[lane] + off, o->base + off, (size_t)len);
        })
    }
    pz_fill_pointers(c, s); /* after the slot is complete: pointers may lead back to it */
  }
  return s;
}

static void *pz_translate(pz_context *c, char *p, int64_t lane) {
  pz_object o;
  if (!p || !pz_find(p, &o))
    return NULL;
  return pz_shadows(c, &o)->shadows[lane] + (p - o.base);
}

static void pz_zero_slot(pz_context *c, pz_slot *s) {
  if (!s->serial)
    return;
  for (int64_t lane = 0; lane < c->width; lane++) {
    char *shadow = s->shadows[lane];
    if (!s->global) {
      memset(shadow, 0, (size_t)s->size);
      continue;
    }
    /* Keep the integers and pointers: save them, zero everything, put them back. */
    char *keep = malloc((size_t)s->size);
    if (!keep)
      pz_fail("out of memory for the shadows of global variables", "");
    memcpy(keep, shadow, (size_t)s->size);
    memset(shadow, 0, (size_t)s->size);
    for (int64_t j = 0; j < s->global->nfields; j++) {
      const pz_field *f = &s->global->fields[j];
      PZ_EACH_RUN(f, off, len, { memcpy(shadow + off, keep + off, (size_t)len); })
    }
    free(keep);
  }
}

/* --------------------------------------------------------------------------- interface */
PZ_WEAK void *__pyzyme_ctx_new(int width, const pz_table *t) {
  pz_register(t);
  return pz_context_new(width);
}

PZ_WEAK void *__pyzyme_ctx_default(int width, const pz_table *t) {
  pz_register(t);
  if (width < 1 || width > PZ_MAX_DEFAULT_WIDTH)
    pz_fail("__enzyme_shadow: the width must be between 1 and 64", "");
  if (!__pyzyme_ctx_st_defaults[width])
    __pyzyme_ctx_st_defaults[width] = pz_context_new(width);
  return __pyzyme_ctx_st_defaults[width];
}

PZ_WEAK void *__pyzyme_ctx_shadow(void *ctx, void *p, int lane, const pz_table *t) {
  pz_register(t);
  pz_context *c = pz_context_of(ctx, "__enzyme_shadow");
  if (lane < 0 || lane >= c->width)
    pz_fail("__enzyme_shadow: the lane is not below the context's width", "");
  pz_object o;
  if (!p || !pz_find(p, &o))
    pz_fail("__enzyme_shadow: the address is not that of a global variable (or of a block "
            "the program allocated)", "");
  return pz_shadows(c, &o)->shadows[lane] + ((char *)p - o.base);
}

PZ_WEAK void *__pyzyme_ctx_default_shadow(void *p, int width, int lane, const pz_table *t) {
  return __pyzyme_ctx_shadow(__pyzyme_ctx_default(width, t), p, lane, t);
}

PZ_WEAK void __pyzyme_ctx_zero(void *ctx, const pz_table *t) {
  pz_register(t);
  pz_context *c = pz_context_of(ctx, "__enzyme_zero_shadows");
  for (int64_t i = 0; i < c->cap; i++)
    if (c->slots[i])
      pz_zero_slot(c, c->slots[i]);
}

/* Before a derivative call reads shadows from ctx: is it a context of `width` lanes? */
PZ_WEAK void __pyzyme_ctx_check(void *ctx, int width, const char *where) {
  pz_context *c = ctx;
  char detail[96];
  if (!c || c->magic != PZ_MAGIC)
    pz_fail(where, ": the value after enzyme_context is not a context made by "
                   "__enzyme_context");
  if (c->width != width) {
    snprintf(detail, sizeof(detail), ": the context has %lld lanes, the derivative %d",
             (long long)c->width, width);
    pz_fail(where, detail);
  }
}

/* What the program does outside derivatives, reported by the code pyzyme instruments. */
PZ_WEAK void __pyzyme_ctx_note_alloc(void *p, int64_t size) {
  if (p && size > 0)
    pz_heap_put(p, size);
}

PZ_WEAK void __pyzyme_ctx_note_free(void *p) {
  if (!p || !pz_heap_find(p))
    return;
  pz_heap_remove(p);
  for (int64_t i = 0; i < __pyzyme_ctx_st_ncontexts; i++) {
    pz_context *c = __pyzyme_ctx_st_contexts[i];
    pz_slot *s = pz_slot_find(c, p);
    if (s && s->serial) {
      for (int64_t lane = 0; lane < c->width; lane++)
        free(s->shadows[lane]);
      free(s->shadows);
      s->shadows = NULL;
      s->serial = 0;
    }
  }
}

/* A pointer was stored at p, inside a global: its shadows point where it points now. */
PZ_WEAK void __pyzyme_ctx_note_store(void *p, const pz_table *t) {
  pz_register(t);
  pz_object o;
  if (!pz_find(p, &o) || !o.global)
    return;
  for (int64_t i = 0; i < __pyzyme_ctx_st_ncontexts; i++) {
    pz_context *c = __pyzyme_ctx_st_contexts[i];
    pz_slot *s = pz_slot_find(c, o.base);
    if (s && s->serial == o.serial)
      pz_fill_pointers(c, s);
  }
}

/* Derivatives of the functions differentiated code may call (a derivative taken inside a
 * function that is differentiated in turn): a context made there has a fresh context for
 * shadow (pyzyme's rule for __pyzyme_ctx_new, shadow_contexts.RULES), which holds the
 * derivatives of its shadows; a shadow's shadow is the same object's there. */
typedef struct {
  void *primal, *shadow;
} pz_pair;

PZ_WEAK pz_pair __pyzyme_ctx_shadow_fwd(void *ctx, void *dctx, void *p, void *dp, int lane,
                                        const pz_table *t, const pz_table *dt) {
  (void)dp, (void)dt;
  if (dctx == ctx)
    pz_fail("__enzyme_shadow in differentiated code: the context has no derivative (it was "
            "made outside the differentiated code); make it inside, or read its shadows "
            "outside", "");
  return (pz_pair){__pyzyme_ctx_shadow(ctx, p, lane, t), __pyzyme_ctx_shadow(dctx, p, lane, t)};
}

PZ_WEAK void __pyzyme_ctx_shadow_rev(void *ctx, void *dctx, void *p, void *dp, int lane,
                                     const pz_table *t, const pz_table *dt) {
  (void)ctx, (void)dctx, (void)p, (void)dp, (void)lane, (void)t, (void)dt;
}

PZ_WEAK void *__enzyme_register_gradient___pyzyme_ctx_shadow[3] = {
    (void *)__pyzyme_ctx_shadow, (void *)__pyzyme_ctx_shadow_fwd,
    (void *)__pyzyme_ctx_shadow_rev};
PZ_WEAK void *__enzyme_register_derivative___pyzyme_ctx_shadow[2] = {
    (void *)__pyzyme_ctx_shadow, (void *)__pyzyme_ctx_shadow_fwd};
PZ_WEAK void *__enzyme_inactivefn_pyzyme_ctx[5] = {
    (void *)__pyzyme_ctx_check, (void *)__pyzyme_ctx_note_alloc, (void *)__pyzyme_ctx_note_free,
    (void *)__pyzyme_ctx_note_store, (void *)__pyzyme_ctx_default};
