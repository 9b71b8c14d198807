/* Recursion: plain, mutual, tail, divide and conquer. */
long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

unsigned long ackermann(unsigned long m, unsigned long n) {
    if (m == 0) return n + 1;
    if (n == 0) return ackermann(m - 1, 1);
    return ackermann(m - 1, ackermann(m, n - 1));
}

static int is_odd(unsigned n);
static int is_even(unsigned n) { return n == 0 ? 1 : is_odd(n - 1); }
static int is_odd(unsigned n) { return n == 0 ? 0 : is_even(n - 1); }
int parity(unsigned n) { return is_even(n) * 2 + is_odd(n); }

double power_rec(double x, unsigned n) {
    if (n == 0) return 1.0;
    double h = power_rec(x, n / 2);
    return (n & 1) ? h * h * x : h * h;
}

long gcd(long a, long b) { return b == 0 ? a : gcd(b, a % b); }

double tree_sum(const double *x, int lo, int hi) {
    if (hi - lo == 1) return x[lo];
    int mid = lo + (hi - lo) / 2;
    return tree_sum(x, lo, mid) + tree_sum(x, mid, hi);
}

double cont_frac(double x, int depth) {
    if (depth == 0) return x;
    return x + 1.0 / cont_frac(x, depth - 1);
}
