// Forward mode of structs passed by value through <enzyme/enzyme>: the C ABI splits a small
// struct into several parameters ({double, double} into two doubles, {float, float, float}
// into <2 x float> and float), passes a larger one byval, and a class with a non-trivial
// copy constructor (std::vector) as the address of a copy.
#include <cmath>
#include <cstdio>
#include <vector>

#include <enzyme/enzyme>

static int failures = 0;
#define APPROX_EQ(a, b, tol)                                                                \
  do {                                                                                      \
    if (std::fabs((a) - (b)) > (tol) * (1 + std::fabs(b))) {                                \
      std::fprintf(stderr, "line %d: %.17g != %.17g\n", __LINE__, (double)(a), (double)(b)); \
      failures++;                                                                           \
    }                                                                                       \
  } while (0)

struct Pair {
  double x, y;
};
struct Vec3 {
  float a, b, c;
};
struct Quad {
  double a, b, c, d;
};

double area(Pair p) { return p.x * p.y * p.y; }
float norm3(Vec3 v) { return v.a * v.a + 2 * v.b * v.b + 3 * v.c * v.c; }
double poly(Quad q) { return q.a + q.b * q.b + q.c * q.c * q.c + std::sin(q.d); }
double weighted(Pair p, Pair w) { return w.x * p.x * p.x + w.y * p.y; }
double total(std::vector<double> v) {
  double s = 0;
  for (double e : v) s += e * e;
  return s;
}

int main() {
  using enzyme::autodiff;
  using enzyme::Forward;
  double d = enzyme::get<0>(
      autodiff<Forward>(area, enzyme::Duplicated<Pair>{Pair{2, 3}, Pair{0.5, -1.5}}));
  APPROX_EQ(d, 0.5 * 9 + 2 * 2 * 3 * -1.5, 1e-12);

  float f = enzyme::get<0>(autodiff<Forward>(
      norm3, enzyme::Duplicated<Vec3>{Vec3{1.5f, -2, 0.5f}, Vec3{1, 0.25f, -3}}));
  APPROX_EQ(f, 2 * 1.5 * 1 + 4 * -2 * 0.25 + 6 * 0.5 * -3, 1e-5);

  d = enzyme::get<0>(autodiff<Forward>(
      poly, enzyme::DuplicatedNoNeed<Quad>{Quad{1, 2, 3, 0.5}, Quad{1, -1, 0.5, 2}}));
  APPROX_EQ(d, 1 + 2 * 2 * -1 + 3 * 9 * 0.5 + std::cos(0.5) * 2, 1e-12);

  d = enzyme::get<0>(autodiff<Forward>(weighted,
                                       enzyme::Duplicated<Pair>{Pair{2, 3}, Pair{1, 4}},
                                       enzyme::Const<Pair>{Pair{5, 7}}));
  APPROX_EQ(d, 5 * 2 * 2 * 1 + 7 * 4, 1e-12);

  std::vector<double> v{1, -2, 3}, dv{0.5, 1, -1};
  d = enzyme::get<0>(
      autodiff<Forward>(total, enzyme::Duplicated<std::vector<double>>{v, dv}));
  APPROX_EQ(d, 2 * (1 * 0.5 + -2 * 1 + 3 * -1), 1e-12);
  return failures;
}
