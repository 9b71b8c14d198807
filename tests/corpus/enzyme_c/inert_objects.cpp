// Objects the differentiated function makes and uses only for bookkeeping: a std::filebuf made
// with new and written through its virtual functions (with a buffer and a float on the stack
// it lends them), a string stream. They hold no derivative, so the calls through their
// vtables are made as they are; the gradient of (2 x)^2 is 8 x.
#include <cstdio>
#include <fstream>
#include <sstream>
#include "test_utils.h"

extern double __enzyme_autodiff(void *, double);

double fn(double x) {
  char buffer[256];
  std::filebuf *fb = new std::filebuf();
  fb->pubsetbuf(buffer, sizeof(buffer));
  if (fb->open("/dev/null", std::ios::binary | std::ios::out)) {
    float marker = 13;
    fb->sputn("sample", 6);
    fb->sputn(reinterpret_cast<const char *>(&marker), sizeof(marker));
    fb->pubsync();
  }
  fb->close();
  delete fb;
  std::ostringstream log;
  log << "x doubled";
  x *= 2;
  return x * x;
}

int main() {
  double x = 2.1;
  APPROX_EQ(__enzyme_autodiff((void *)fn, x), 8 * x, 1e-12);
  return failures;
}
