"""A PyTorch training step whose loss runs a Numba kernel: ``pyzyme.torch.wrap`` vs torch.

The model (an MLP) maps a latent code per sample to the initial state of a 1-D heat equation
(``--width`` cells) and learns the diffusivity; the loss integrates ``--steps`` explicit steps
and compares the end state with a target. Rows:

- ``pyzyme.torch.wrap(diffuse)``: the solver as a Numba kernel (loops over samples, time and
  cells), its gradient pyzyme's reverse mode, called by autograd;
- ``torch``: the same solver in torch, vectorized over samples and cells, a Python loop over
  time steps (as a torch user writes it; autograd records every step);
- with ``--compile``, the wrapped kernel again with the model and loss under
  ``torch.compile(fullgraph=True)`` (inductor; Adam's step stays eager); with
  ``--compile-torch`` the torch solver too: its loop is unrolled into the graph, its compile
  takes minutes, and g++ 12 failed on inductor's C++ for it here (an internal compiler
  error), which the row then reports.

``--threads`` sets torch's threads (inductor's OpenMP kernels slow down by 40x when two threads
share two cores with other work; the Numba kernel and its derivative run on one thread).

Each row gives the first step's time (Numba's compile and pyzyme's derivative build, or
torch.compile's), then the median time per training step (forward, backward, Adam) over
``--iters`` steps, and the largest difference of the trained parameters from the torch row's:
both rows train the same model from the same start, so they agree to rounding.

    python benchmarks/torch_wrap.py [--batch 8] [--width 128] [--steps 200] [--iters 30]
                                    [--threads N] [--compile] [--compile-torch]
"""

from __future__ import annotations

import argparse
import sys
import time

import numba
import numpy as np

try:
    import torch
except ImportError:   # an optional peer, as in the other scripts
    print("PyTorch is not installed (pip install pyzyme[torch]): skipped")
    sys.exit(0)

import pyzyme.torch  # noqa: E402

torch.set_default_dtype(torch.float64)


@numba.njit
def diffuse(u0, k, steps):
    """``steps`` explicit steps of u_t = k u_xx (fixed ends) for each row of ``u0``."""
    u = u0.copy()
    v = np.empty(u.shape[1])
    for b in range(u.shape[0]):
        for _ in range(steps):
            for i in range(u.shape[1]):
                v[i] = u[b, i]
            for i in range(1, u.shape[1] - 1):
                u[b, i] = v[i] + k * (v[i - 1] - 2.0 * v[i] + v[i + 1])
    return u


def diffuse_torch(u0, k, steps):
    u = u0
    for _ in range(steps):
        inner = u[:, 1:-1] + k * (u[:, :-2] - 2.0 * u[:, 1:-1] + u[:, 2:])
        u = torch.cat([u[:, :1], inner, u[:, -1:]], dim=1)
    return u


class Model(torch.nn.Module):
    def __init__(self, latent: int, width: int, solver, steps: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(latent, 64), torch.nn.Tanh(),
                                       torch.nn.Linear(64, width))
        self.raw_k = torch.nn.Parameter(torch.tensor(0.0))
        self.solver, self.steps = solver, steps

    def forward(self, z):
        k = 0.4 * torch.sigmoid(self.raw_k)          # stable explicit steps: k < 0.5
        return self.solver(self.net(z), k, self.steps)


def _train(solver, opts, compile_step: bool):
    torch.manual_seed(0)
    model = Model(16, opts.width, solver, opts.steps)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    z = torch.randn(opts.batch, 16, generator=g)
    target = torch.sin(torch.linspace(0, np.pi, opts.width)).expand(opts.batch, -1)

    def loss_of():
        return ((model(z) - target) ** 2).mean()

    if compile_step:   # the model and loss, forward and backward; Adam stays eager
        torch._dynamo.reset()
        loss_of = torch.compile(loss_of, fullgraph=True)

    def step():
        optimizer.zero_grad()
        loss = loss_of()
        loss.backward()
        optimizer.step()
        return loss
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    times = []
    for _ in range(opts.iters):
        start = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - start)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return first, float(np.median(times)), float(loss.detach()), params


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--compile", action="store_true",
                        help="also the wrapped kernel's model under torch.compile (inductor)")
    parser.add_argument("--compile-torch", action="store_true",
                        help="also the torch solver's model under torch.compile (minutes)")
    opts = parser.parse_args(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    rows = [("torch (vectorized, loop over steps)", diffuse_torch, False),
            ("pyzyme.torch.wrap(diffuse)", pyzyme.torch.wrap(diffuse), False)]
    if opts.compile:
        rows.append(("torch.compile: pyzyme.torch.wrap(diffuse)", pyzyme.torch.wrap(diffuse),
                     True))
    if opts.compile_torch:
        rows.append(("torch.compile: torch", diffuse_torch, True))
    print(f"Training step of an MLP whose loss runs a heat-equation solver: batch "
          f"{opts.batch}, {opts.width} cells, {opts.steps} steps; median of {opts.iters} "
          f"steps; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| solver | first step (s) | per step (ms) | vs torch | max diff of parameters |")
    print("| --- | ---: | ---: | ---: | ---: |", flush=True)
    base = reference = None
    for name, solver, compiled in rows:   # each printed when done: compiling takes long
        try:
            first, per_step, _loss, params = _train(solver, opts, compiled)
        except Exception as e:  # noqa: BLE001 - a compiler's failure is a row's result
            print(f"| {name} | failed: {type(e).__name__}: {str(e).splitlines()[0][:80]} |"
                  f" | | |", flush=True)
            continue
        if base is None:
            base, reference = per_step, params
        diff = float((params - reference).abs().max())
        print(f"| {name} | {first:.2f} | {per_step * 1e3:.2f} | {per_step / base:.2f}x | "
              f"{diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
