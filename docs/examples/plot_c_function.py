"""
A C function differentiated with ``pyzyme cc``
==============================================

The Fourier series of a square wave, written in C, with its derivative asked for through
Enzyme's interface, ``__enzyme_autodiff``. ``pyzyme cc -shared`` compiles the file with clang,
writes the derivative in place of the call, and links a shared library; Python calls both
functions through ``ctypes``. The number of terms is an ``int`` marked ``enzyme_const``.
"""

import ctypes
import os
import subprocess
import sys
import tempfile

import matplotlib.pyplot as plt
import numpy as np

SOURCE = r"""
#include <math.h>

extern int enzyme_const;
double __enzyme_autodiff(void *, ...);

/* 4/pi * sum of sin((2k+1) x) / (2k+1): a square wave, more terms sharper */
double square_wave(double x, int terms) {
    double s = 0.0;
    for (int k = 0; k < terms; k++) {
        double m = 2.0 * k + 1.0;
        s += sin(m * x) / m;
    }
    return 4.0 / M_PI * s;
}

double d_square_wave(double x, int terms) {
    return __enzyme_autodiff((void *)square_wave, x, enzyme_const, terms);
}
"""

work = tempfile.mkdtemp()
with open(os.path.join(work, "wave.c"), "w") as f:
    f.write(SOURCE)
library = os.path.join(work, "libwave.so")
subprocess.run([sys.executable, "-m", "pyzyme", "cc", os.path.join(work, "wave.c"), "-O2",
                "-shared", "-o", library], check=True)
lib = ctypes.CDLL(library)
for name in ("square_wave", "d_square_wave"):
    getattr(lib, name).restype = ctypes.c_double
    getattr(lib, name).argtypes = (ctypes.c_double, ctypes.c_int)

# %%
# The derivative is the sum of the cosines, 4/pi * sum of cos((2k+1) x): checked here, then
# drawn for a few numbers of terms.
x = np.linspace(-np.pi, np.pi, 600)
exact = 4.0 / np.pi * sum(np.cos((2 * k + 1) * x) for k in range(8))
from_c = np.array([lib.d_square_wave(v, 8) for v in x])
print("max |derivative from C - closed form| (8 terms):", float(np.max(np.abs(from_c - exact))))

fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
for terms in (2, 8, 32):
    ax.plot(x, [lib.square_wave(v, terms) for v in x], label=f"{terms} terms")
    ax2.plot(x, [lib.d_square_wave(v, terms) for v in x], label=f"{terms} terms")
ax.set_ylabel("square_wave(x)")
ax2.set_ylabel("d square_wave / dx")
ax2.set_xlabel("x")
ax.legend(fontsize=8)
fig.suptitle("A C function and its derivative from __enzyme_autodiff (pyzyme cc)")
fig.tight_layout()
