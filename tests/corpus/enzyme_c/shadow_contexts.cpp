// <enzyme/enzyme>'s contexts of global shadows: enzyme::context(), enzyme::shadow(ctx, g) and
// enzyme::autodiff<Mode>(ctx, f, ...), with a namespace-scope global and a static member.
#include <cmath>
#include <cstdio>
#include <enzyme/enzyme>

static int failures = 0;
static void check(double got, double want, int line) {
  if (!(std::fabs(got - want) <= 1e-12 * (1 + std::fabs(want)))) {
    std::fprintf(stderr, "line %d: got %.17g, expected %.17g\n", line, got, want);
    failures++;
  }
}
#define CHECK(got, want) check((got), (want), __LINE__)

namespace model {
double gain = 1.5;
}
struct Params {
  static double bias;
};
double Params::bias = -0.5;

// gain sin(x) + bias x^2
double f(double x) { return model::gain * std::sin(x) + Params::bias * x * x; }

int main() {
  auto ctx = enzyme::context();
  double *dgain = enzyme::shadow(ctx, model::gain);
  double *dbias = enzyme::shadow(ctx, Params::bias);
  double x = 0.7;
  auto r = enzyme::autodiff<enzyme::Reverse>(ctx, f, enzyme::Active(x));
  CHECK(enzyme::get<0>(enzyme::get<0>(r)), model::gain * std::cos(x) + 2 * Params::bias * x);
  CHECK(*dgain, std::sin(x));
  CHECK(*dbias, x * x);

  auto p = enzyme::autodiff<enzyme::ReverseWithPrimal>(ctx, f, enzyme::Active(x));
  CHECK(enzyme::get<1>(p), f(x));
  CHECK(*dgain, 2 * std::sin(x));  // added to what the first call left

  *dgain = 0.0;
  *dbias = 1.0;
  auto t = enzyme::autodiff<enzyme::Forward>(ctx, f, enzyme::Duplicated<double>(x, 0.0));
  CHECK(enzyme::get<0>(t), x * x);

  auto other = enzyme::context();
  enzyme::autodiff<enzyme::Reverse>(other, f, enzyme::Active(2.0));
  CHECK(*enzyme::shadow(other, Params::bias), 4.0);
  CHECK(*dbias, 1.0);
  return failures;
}
