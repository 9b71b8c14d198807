// The C++ library's streams and strings inside differentiated code: printing an active value,
// parsing numbers from a string stream, measuring a string and giving a stream a locale (a
// virtual call through the stream buffer) carry no derivative (Enzyme treats the library's
// stream, locale and string functions as inactive).
// flags: -fno-exceptions
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double f(double x) {
  std::cerr << "x = " << x << ", x^2 = " << x * x << std::endl;
  std::stringstream in("2.5 4");
  double a;
  int n;
  in >> a >> n;
  std::string label = "label";
  std::wcout.imbue(std::locale());
  return a * x * x + n + label.size() * x;
}

int main() {
  double x = 1.5, want = 2 * 2.5 * x + 5;
  int failures = 0;
  double got = __enzyme_autodiff((void *)f, x);
  if (!(std::fabs(got - want) < 1e-12)) { std::fprintf(stderr, "reverse %g != %g\n", got, want); failures++; }
  got = __enzyme_fwddiff((void *)f, x, 1.0);
  if (!(std::fabs(got - want) < 1e-12)) { std::fprintf(stderr, "forward %g != %g\n", got, want); failures++; }
  return failures;
}
