// Forward mode of functions returning a struct through memory (sret): a std::vector, a plain
// struct of three doubles, and a lambda's function pointer. The call's result holds the
// tangent (DuplicatedNoNeed), the result and its tangent (Duplicated), or the result alone
// (Const).
#include <cmath>
#include <cstdio>
#include <vector>

#include <enzyme/enzyme>

extern "C" {
extern int enzyme_dup, enzyme_const;
}
struct Big {
  double a, b, c;
};
template <class RT, class... A> RT __enzyme_fwddiff(void *, A...);

static int failures = 0;
#define APPROX_EQ(a, b)                                                                     \
  do {                                                                                      \
    if (std::fabs((a) - (b)) > 1e-12 * (1 + std::fabs(b))) {                                \
      std::fprintf(stderr, "line %d: %.17g != %.17g\n", __LINE__, (double)(a), (double)(b)); \
      failures++;                                                                           \
    }                                                                                       \
  } while (0)

std::vector<double> curve(const std::vector<double> &x) {
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); i++) r[i] = x[i] * x[i] + std::sin(x[i]);
  return r;
}

Big polar(double r, double t) { return Big{r * std::cos(t), r * std::sin(t), r * r}; }

int main() {
  std::vector<double> x{0.5, -1.25, 2.0}, dx{1.0, 0.5, -2.0};
  auto d = enzyme::get<0>(enzyme::autodiff<enzyme::Forward,
                                           enzyme::DuplicatedNoNeed<std::vector<double>>>(
      curve, enzyme::Duplicated<const std::vector<double> &>(x, dx)));
  for (size_t i = 0; i < 3; i++) APPROX_EQ(d[i], (2 * x[i] + std::cos(x[i])) * dx[i]);

  auto both = enzyme::autodiff<enzyme::Forward, enzyme::Duplicated<std::vector<double>>>(
      curve, enzyme::Duplicated<const std::vector<double> &>(x, dx));
  for (size_t i = 0; i < 3; i++) {
    APPROX_EQ(enzyme::get<0>(both)[i], x[i] * x[i] + std::sin(x[i]));
    APPROX_EQ(enzyme::get<1>(both)[i], (2 * x[i] + std::cos(x[i])) * dx[i]);
  }

  auto value = enzyme::get<0>(
      enzyme::autodiff<enzyme::Forward, enzyme::Const<std::vector<double>>>(
          curve, enzyme::Duplicated<const std::vector<double> &>(x, dx)));
  for (size_t i = 0; i < 3; i++) APPROX_EQ(value[i], x[i] * x[i] + std::sin(x[i]));

  // The C interface: a 24-byte struct comes back through memory.
  double r = 1.5, t = 0.25;
  Big db = __enzyme_fwddiff<Big>((void *)polar, r, 1.0, t, 0.0);
  APPROX_EQ(db.a, std::cos(t));
  APPROX_EQ(db.b, std::sin(t));
  APPROX_EQ(db.c, 2 * r);
  db = __enzyme_fwddiff<Big>((void *)polar, enzyme_const, r, t, 1.0);
  APPROX_EQ(db.a, -r * std::sin(t));
  APPROX_EQ(db.b, r * std::cos(t));
  APPROX_EQ(db.c, 0.0);

  // A lambda's function pointer returning a vector (Enzyme's gh-1785).
  auto kernel = [](const std::vector<double> &v, const double &w) {
    auto out = v;
    for (auto &e : out) e *= w * e;
    return out;
  };
  double w = 3.0;
  auto dk = enzyme::get<0>(enzyme::autodiff<enzyme::Forward,
                                            enzyme::DuplicatedNoNeed<std::vector<double>>>(
      +kernel, enzyme::Duplicated<std::vector<double> *>{&x, &dx},
      enzyme::Const<double *>{&w}));
  for (size_t i = 0; i < 3; i++) APPROX_EQ(dk[i], 2 * w * x[i] * dx[i]);
  return failures;
}
