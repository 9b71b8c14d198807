// Enzyme's C++ interface, <enzyme/enzyme>, as pyzyme cc ships it: enzyme::autodiff in reverse
// and forward mode, with and without the primal result, over floats, a const reference, a
// pointer and an integer constant. Values are checked against derivatives worked by hand.
// flags: -std=c++17
#include <cmath>
#include <cstdio>
#include <enzyme/enzyme>

static int failures = 0;
static void check(const char *what, double got, double want) {
  if (!(std::fabs(got - want) < 1e-12 * (1 + std::fabs(want)))) {
    std::fprintf(stderr, "%s: %.17g != %.17g\n", what, got, want);
    failures++;
  }
}

// x^2 y + n y
double f(double x, double y, int n) { return x * x * y + n * y; }

// sum_i a[i] * s
double weighted(const double *a, const double &s, int n) {
  double t = 0;
  for (int i = 0; i < n; i++) t += a[i] * s;
  return t;
}

// writes through a pointer and returns nothing
void scale(double *out, double x) { *out = 3 * x * x; }

int main() {
  double x = 1.5, y = -2.0;
  int n = 4;

  // reverse: df/dx = 2xy, df/dy = x^2 + n
  auto r = enzyme::autodiff<enzyme::Reverse>(f, enzyme::Active(x), enzyme::Active(y),
                                             enzyme::Const(n));
  check("reverse df/dx", enzyme::get<0>(enzyme::get<0>(r)), 2 * x * y);
  check("reverse df/dy", enzyme::get<1>(enzyme::get<0>(r)), x * x + n);

  // reverse with the primal result, y held constant
  auto rp = enzyme::autodiff<enzyme::ReverseWithPrimal>(f, enzyme::Active(x), enzyme::Const(y),
                                                        enzyme::Const(n));
  check("with primal df/dx", enzyme::get<0>(enzyme::get<0>(rp)), 2 * x * y);
  check("with primal f", enzyme::get<1>(rp), x * x * y + n * y);

  // forward: tangent along (dx, dy) = (1, 0.5)
  auto t = enzyme::autodiff<enzyme::Forward>(f, enzyme::Duplicated<double>(x, 1.0),
                                             enzyme::Duplicated<double>(y, 0.5),
                                             enzyme::Const<int>(n));
  check("forward tangent", enzyme::get<0>(t), 2 * x * y + 0.5 * (x * x + n));

  // forward returning the primal and the tangent
  auto tp = enzyme::autodiff<enzyme::ForwardWithPrimal>(f, enzyme::Duplicated<double>(x, 1.0),
                                                        enzyme::Const<double>(y),
                                                        enzyme::Const<int>(n));
  check("forward primal", enzyme::get<0>(tp), x * x * y + n * y);
  check("forward with primal tangent", enzyme::get<1>(tp), 2 * x * y);

  // a pointer and a const reference: d/da[i] = s, d/ds = sum a
  double a[3] = {1.0, 2.0, 4.0}, da[3] = {0, 0, 0}, s = 0.25, ds = 0;
  enzyme::autodiff<enzyme::Reverse>(weighted, enzyme::Duplicated<const double *>(a, da),
                                    enzyme::Duplicated<const double &>(s, ds),
                                    enzyme::Const<int>(3));
  for (int i = 0; i < 3; i++) check("reverse d/da[i]", da[i], s);
  check("reverse d/ds (reference)", ds, 7.0);

  // void function, output through a pointer: its shadow seeds the reverse pass
  double out = 0, dout = 1.0;
  auto v = enzyme::autodiff<enzyme::Reverse>(scale, enzyme::Duplicated<double *>(&out, &dout),
                                             enzyme::Active(x));
  check("void reverse d/dx", enzyme::get<0>(enzyme::get<0>(v)), 6 * x);

  // forward over the same void function
  double tout = 0;
  enzyme::autodiff<enzyme::Forward>(scale, enzyme::Duplicated<double *>(&out, &tout),
                                    enzyme::Duplicated<double>(x, 2.0));
  check("void forward tangent", tout, 6 * x * 2.0);
  check("void forward primal", out, 3 * x * x);
  return failures;
}
