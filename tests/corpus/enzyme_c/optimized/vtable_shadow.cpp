// __enzyme_virtualreverse of an object's vtable: a shadow object whose vtable pointer is the
// shadow vtable makes reverse mode call the derivatives of the object's virtual functions
// (one calling another virtual function of its object). The vtable's address must be known
// where __enzyme_virtualreverse is called: clang folds the read of a fresh object's vtable
// pointer at -O2 (tests/test_enzyme_c.py builds this at -O2 and -O3 only).
#include <cmath>
#include <cstdio>

extern int enzyme_dup, enzyme_out;
template <typename... Args> double __enzyme_autodiff(void *, Args...);
template <typename T> T __enzyme_virtualreverse(T);

struct Model {
  double a = 0;
  virtual double eval(double x) = 0;
  virtual double scale() { return 1.0; }
  virtual ~Model() {}
};
struct Square : Model {
  double eval(double x) override { return a * x * x * scale(); }
};
struct Wave : Model {
  double eval(double x) override { return a * std::sin(x) * scale(); }
  double scale() override { return 2.0; }
};

// m.eval(x) + m.a
double run(Model &m, double x) { return m.eval(x) + m.a; }

static int failures = 0;
static void check(double got, double want, int line) {
  if (!(std::fabs(got - want) <= 1e-12 * (1 + std::fabs(want)))) {
    std::fprintf(stderr, "line %d: got %.17g, expected %.17g\n", line, got, want);
    failures++;
  }
}

template <class T> void derivatives(double a, double x, double dx, double da, int line) {
  Model *m = new T();
  m->a = a;
  Model *dm = new T();
  *(void **)dm = __enzyme_virtualreverse(*(void **)dm);
  check(__enzyme_autodiff((void *)run, enzyme_dup, m, dm, enzyme_out, x), dx, line);
  check(dm->a, da, line);
  delete m;
}

int main() {
  double x = 0.6;
  derivatives<Square>(1.5, x, 2 * 1.5 * x, x * x + 1, __LINE__);
  derivatives<Wave>(1.5, x, 2 * 1.5 * std::cos(x), 2 * std::sin(x) + 1, __LINE__);
  return failures;
}
