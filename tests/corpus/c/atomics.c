/* C11 atomics and GCC builtins: atomicrmw (add, sub, and, or, xor, xchg, max, fadd),
   cmpxchg (strong, weak, loops), fences, atomic load/store with every ordering. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

static _Atomic long counter;
static atomic_int flags;
static _Atomic double total;
static atomic_flag lock = ATOMIC_FLAG_INIT;

long bump(long by) { return atomic_fetch_add_explicit(&counter, by, memory_order_relaxed); }
long drop(long by) { return atomic_fetch_sub(&counter, by); }
int set_bits(int m) { return atomic_fetch_or_explicit(&flags, m, memory_order_release); }
int clear_bits(int m) { return atomic_fetch_and_explicit(&flags, ~m, memory_order_acq_rel); }
int toggle_bits(int m) { return atomic_fetch_xor(&flags, m); }
long swap(long v) { return atomic_exchange_explicit(&counter, v, memory_order_acquire); }

bool try_claim(int expected, int desired) {
    return atomic_compare_exchange_strong(&flags, &expected, desired);
}

bool try_claim_weak(long *expected, long desired) {
    return atomic_compare_exchange_weak_explicit(&counter, expected, desired,
                                                 memory_order_acq_rel, memory_order_acquire);
}

void add_total(double x) {
    double old = atomic_load_explicit(&total, memory_order_relaxed);
    while (!atomic_compare_exchange_weak(&total, &old, old + x)) {
    }
}

double read_total(void) { return atomic_load(&total); }
void publish(double x) { atomic_store_explicit(&total, x, memory_order_release); }

void spin_lock(void) { while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) {} }
void spin_unlock(void) { atomic_flag_clear_explicit(&lock, memory_order_release); }

void fences(void) {
    atomic_thread_fence(memory_order_seq_cst);
    atomic_thread_fence(memory_order_acquire);
    atomic_thread_fence(memory_order_release);
    atomic_signal_fence(memory_order_acq_rel);
}

int64_t gcc_builtins(int64_t *p, int64_t v) {
    int64_t a = __atomic_fetch_max(p, v, __ATOMIC_SEQ_CST);
    int64_t b = __atomic_fetch_min(p, v, __ATOMIC_RELAXED);
    int64_t c = __sync_fetch_and_add(p, 1);
    int64_t d = __sync_val_compare_and_swap(p, c, c + 1);
    __sync_synchronize();
    return a + b + c + d + __atomic_nand_fetch(p, v, __ATOMIC_RELAXED);
}

float atomic_float_add(float *p, float v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

unsigned __int128 wide_cas(unsigned __int128 *p, unsigned __int128 old, unsigned __int128 nv) {
    __atomic_compare_exchange_n(p, &old, nv, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return old;
}
