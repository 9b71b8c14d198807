#include <stdio.h>
double square(double x) { return x * x; }
double __enzyme_autodiff(void*, double);
int main() {
    double x = 3.14;
    double grad_x = __enzyme_autodiff((void*)square, x);   // 2 * x = 6.28
    printf("square'(%f) = %f\n", x, grad_x);
}
