/* Globals and linkage: constants, static locals, thread-local storage, weak symbols,
   aliases, hidden visibility, sections, constructors (llvm.global_ctors), llvm.used. */
#include <stddef.h>

int counter = 7;
const double table[4] = {1.0, 0.5, 0.25, 0.125};
static double scratch[64];
_Thread_local int tls_depth;
__attribute__((weak)) int weak_value = 3;
__attribute__((visibility("hidden"))) double hidden_scale = 2.0;
__attribute__((section(".pyzyme_data"))) int in_section = 11;
__attribute__((used)) static int keep_me = 99;
int *const counter_ptr = &counter;
const char *const greeting = "hello";
struct pair { int a; double b; } pairs[2] = {{1, 2.0}, {3, 4.0}};

int next_id(void) { static int id = 0; return ++id; }

int enter(void) { return ++tls_depth; }

double lookup(size_t i) { return table[i & 3] * hidden_scale; }

double fill(int n) {
    for (int i = 0; i < n && i < 64; i++) scratch[i] = i * 0.5;
    double s = 0.0;
    for (int i = 0; i < 64; i++) s += scratch[i];
    return s;
}

int real_impl(int x) { return x * 3 + weak_value; }
int aliased(int x) __attribute__((alias("real_impl")));

__attribute__((weak)) int maybe_override(int x) { return x; }

static void init_hook(void) { counter += 1; }
__attribute__((constructor)) static void setup(void) { init_hook(); }
__attribute__((destructor)) static void teardown(void) { counter = 0; }

__attribute__((noinline, cold)) static int slow_path(int x) { return x * x * x; }
__attribute__((hot)) int dispatch(int x) { return x > 1000 ? slow_path(x) : x + counter + *counter_ptr + pairs[x & 1].a; }
