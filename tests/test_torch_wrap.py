"""pyzyme.torch.wrap: Numba kernels as differentiable PyTorch operations.

Five kernels (issue 25: a scalar loss with loops, an array map with a time loop and a
parameter, two arrays and a scalar, a temporary allocated inside, a tuple result), each against
a pure-torch re-implementation (values and gradients by torch's own autograd) and finite
differences (torch.autograd.gradcheck), eagerly and under torch.compile(fullgraph=True).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numba
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install "
                                            "pyzyme[torch]): pyzyme.torch is not tested")

import pyzyme  # noqa: E402
import pyzyme.torch as pt  # noqa: E402

F64 = torch.float64


# The kernels, and the same computations in torch ------------------------------------------


@numba.njit
def chain_energy(x, k):                 # a scalar loss with loops
    s = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i]
        s += k * d * d + math.sin(x[i]) ** 2
    return s


def chain_energy_torch(x, k):
    return (k * (x[1:] - x[:-1]) ** 2 + torch.sin(x[:-1]) ** 2).sum()


def diffuse(u, k, n):                   # an array map with a time loop and a parameter
    u = u.copy()
    for _ in range(n):
        v = u.copy()
        for i in range(1, u.size - 1):
            u[i] = v[i] + k * (v[i - 1] - 2.0 * v[i] + v[i + 1])
    return u


def diffuse_torch(u, k, n):
    for _ in range(n):
        u = torch.cat([u[:1], u[1:-1] + k * (u[:-2] - 2.0 * u[1:-1] + u[2:]), u[-1:]])
    return u


@numba.njit
def misfit(a, b, s):                    # two array inputs and a scalar
    total = 0.0
    for i in range(a.shape[0]):
        r = a[i] - s * b[i]
        total += r * r / (1.0 + b[i] * b[i])
    return total


def misfit_torch(a, b, s):
    return ((a - s * b) ** 2 / (1.0 + b * b)).sum()


@numba.njit
def softmax(x):                         # a temporary allocated inside
    tmp = np.empty(x.shape[0])
    top = x.max()
    for i in range(x.shape[0]):
        tmp[i] = math.exp(x[i] - top)
    out = np.empty_like(tmp)
    total = tmp.sum()
    for i in range(x.shape[0]):
        out[i] = tmp[i] / total
    return out


def softmax_torch(x):
    return torch.softmax(x, 0)


@numba.njit
def row_stats(x, w):                    # a tuple: a float, an array and an int
    sums = np.zeros(x.shape[0])
    energy = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            sums[i] += w[j] * x[i, j]
            energy += x[i, j] ** 2 * w[j]
    return energy, sums, x.shape[0]


def row_stats_torch(x, w):
    return (x ** 2 * w).sum(), x @ w, x.shape[0]


def _inputs(name: str, seed: int = 0):
    """The arguments of kernel ``name``: float64 tensors requiring grad, and constants."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.rand(*shape, generator=g, dtype=F64).requires_grad_()
    return {
        "chain_energy": lambda: (r(7), 0.8),
        "diffuse": lambda: (r(9), torch.tensor(0.2, dtype=F64, requires_grad=True), 6),
        "misfit": lambda: (r(5), r(5), torch.tensor(1.3, dtype=F64, requires_grad=True)),
        "softmax": lambda: (r(6),),
        "row_stats": lambda: (r(3, 4), r(4)),
    }[name]()


KERNELS = {
    "chain_energy": (chain_energy, chain_energy_torch),
    "diffuse": (diffuse, diffuse_torch),       # a plain Python function, compiled by pyzyme
    "misfit": (misfit, misfit_torch),
    "softmax": (softmax, softmax_torch),
    "row_stats": (row_stats, row_stats_torch),
}
WRAPPED = {name: pt.wrap(kernel) for name, (kernel, _) in KERNELS.items()}


def _floats(out) -> list:
    """The float tensors of a result (a tensor or a tuple)."""
    items = out if isinstance(out, tuple) else (out,)
    return [t for t in items if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _loss(out) -> torch.Tensor:
    """A scalar of every float result, each weighted differently, so that a swapped or
    dropped cotangent shows."""
    return sum((t * torch.linspace(1.0, 2.0, t.numel(), dtype=t.dtype).reshape(t.shape)).sum()
               * (k + 1) for k, t in enumerate(_floats(out)))


def _differentiable(args) -> list:
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


# Values and gradients against torch ---------------------------------------------------------


@pytest.mark.parametrize("name", list(KERNELS))
def test_values_and_gradients_match_torch(name):
    wrapped, reference = WRAPPED[name], KERNELS[name][1]
    args = _inputs(name)
    out, expected = wrapped(*args), reference(*args)
    assert type(out) is type(expected) or isinstance(out, torch.Tensor)
    if isinstance(expected, tuple):
        assert len(out) == len(expected)
        assert int(out[2]) == expected[2] and out[2].dtype == torch.int64
    for got, want in zip(_floats(out), _floats(expected)):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    inputs = _differentiable(args)
    grads = torch.autograd.grad(_loss(out), inputs)
    want = torch.autograd.grad(_loss(expected), inputs)
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(KERNELS))
def test_gradcheck_against_finite_differences(name):
    wrapped = WRAPPED[name]
    args = _inputs(name, seed=1)
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def f(*tensors):
        full = list(args)
        for i, t in zip(positions, tensors):
            full[i] = t
        return tuple(_floats(wrapped(*full)))
    assert torch.autograd.gradcheck(f, [args[i] for i in positions])


def test_backward_accumulates_into_grad():
    x = torch.tensor([0.0, 1.0, 3.0], dtype=F64, requires_grad=True)
    WRAPPED["chain_energy"](x, 0.5).backward()
    first = x.grad.clone()
    WRAPPED["chain_energy"](x, 0.5).backward()
    expected = torch.autograd.grad(chain_energy_torch(x, 0.5), x)[0]
    torch.testing.assert_close(first, expected)
    torch.testing.assert_close(x.grad, 2 * expected)


def test_only_the_inputs_asked_for_get_gradients():
    a, b, s = _inputs("misfit")
    out = WRAPPED["misfit"](a, b.detach(), s)
    ga, gs = torch.autograd.grad(out, (a, s))
    wa, ws = torch.autograd.grad(misfit_torch(a, b.detach(), s), (a, s))
    torch.testing.assert_close(ga, wa)
    torch.testing.assert_close(gs, ws)
    assert gs.shape == () and gs.dtype == F64


def test_float32_tensors():
    x = torch.linspace(-1.0, 1.0, 6, dtype=torch.float32, requires_grad=True)
    y = WRAPPED["softmax"](x)
    assert y.dtype == torch.float64   # what the kernel returns (np.empty: float64)
    (g,) = torch.autograd.grad((y * torch.arange(6.0)).sum(), x)
    x64 = x.detach().double().requires_grad_()
    (want,) = torch.autograd.grad((softmax_torch(x64) * torch.arange(6.0)).sum(), x64)
    assert g.dtype == torch.float32
    torch.testing.assert_close(g.double(), want, rtol=1e-6, atol=1e-7)


def test_a_non_contiguous_tensor_is_read_in_its_own_order():
    x = torch.rand(4, 3, dtype=F64).t().requires_grad_()     # (3, 4), Fortran order
    w = torch.rand(4, dtype=F64)
    energy, sums, _ = WRAPPED["row_stats"](x, w)
    e_want, s_want, _ = row_stats_torch(x, w)
    torch.testing.assert_close(sums, s_want)
    (g,) = torch.autograd.grad(energy + sums.sum(), x)
    (want,) = torch.autograd.grad(e_want + s_want.sum(), x)
    torch.testing.assert_close(g, want)


def _poke(x):
    x[0, 0] = 5.0
    return x.sum()


def test_tensors_are_passed_without_a_copy_where_their_layout_allows():
    x = torch.zeros(2, 3, dtype=F64)
    with pytest.raises(pyzyme.UnsupportedError, match="_poke .*wrote into its argument 0"):
        pt.wrap(_poke)(x)
    assert x[0, 0].item() == 5.0            # C order: the kernel had the tensor's memory
    y = torch.zeros(3, 2, dtype=F64).t()
    with pytest.raises(pyzyme.UnsupportedError, match="wrote into its argument 0"):
        pt.wrap(_poke)(y)
    assert y[0, 0].item() == 0.0            # Fortran order: a C-ordered copy


# Second order -------------------------------------------------------------------------------


def test_gradgradcheck_through_hvp():
    x = torch.rand(6, dtype=F64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x: WRAPPED["chain_energy"](x, 0.7), (x,))


def test_double_backward_gives_the_hessian_vector_product():
    x = torch.rand(6, dtype=F64, requires_grad=True)
    v = torch.rand(6, dtype=F64)
    (g,) = torch.autograd.grad(WRAPPED["chain_energy"](x, 0.7) * 3.0, x, create_graph=True)
    (hv,) = torch.autograd.grad(g, x, v)
    want = torch.autograd.functional.hvp(lambda x: 3.0 * chain_energy_torch(x, 0.7), x, v)[1]
    torch.testing.assert_close(hv, want)
    torch.testing.assert_close(hv.detach().numpy(), 3.0 * pyzyme.hvp(
        chain_energy, x.detach().numpy(), v.numpy(), 0.7))


def _weighted_energy(w, x):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * math.cos(x[i]) * x[i] ** 2
    return s


def test_gradgradcheck_of_a_second_argument():
    w = torch.rand(5, dtype=F64)
    x = torch.rand(5, dtype=F64, requires_grad=True)
    op = pt.wrap(_weighted_energy)
    assert torch.autograd.gradgradcheck(lambda x: op(w, x), (x,))


def test_double_backward_outside_hvp_is_a_clear_error():
    u, k, n = _inputs("diffuse")
    (g,) = torch.autograd.grad(WRAPPED["diffuse"](u, k, n).sum(), u, create_graph=True)
    with pytest.raises(pyzyme.UnsupportedError, match="double backward.*diffuse.*pyzyme.hvp"):
        torch.autograd.grad(g.sum(), u)


def test_forward_mode_is_an_error_not_a_zero_tangent():
    # torch.library gives a Python operation a zero tangent under forward mode (no formula)
    op = WRAPPED["chain_energy"]
    x, t = torch.rand(5, dtype=F64), torch.ones(5, dtype=F64)
    with pytest.raises(pyzyme.UnsupportedError, match="forward-mode AD.*chain_energy"):
        torch.func.jvp(lambda x: op(x, 0.5), (x,), (t,))
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level(), pytest.raises(pyzyme.UnsupportedError, match="forward-mode"):
        op(fwAD.make_dual(x, t), 0.5)
    op(x, 0.5)   # outside forward mode, as before


# Arguments without derivatives --------------------------------------------------------------


@numba.njit
def gather(x, index, squared, scale):
    s = 0.0
    for i in index:
        s += x[i] * x[i] if squared else x[i]
    return s * scale


@pytest.mark.parametrize("squared", [True, False])
def test_integer_tensors_and_flags_are_constants(squared):
    x = torch.rand(5, dtype=F64, requires_grad=True)
    index = torch.tensor([0, 3, 3, 4])
    op = pt.wrap(gather)
    out = op(x, index, squared, 2)
    want = ((x[index] ** 2 if squared else x[index]).sum() * 2)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(torch.autograd.grad(out, x)[0], torch.autograd.grad(want, x)[0])


def test_a_result_that_is_an_argument_is_copied():
    op = pt.wrap(lambda x: x)
    x = torch.rand(3, dtype=F64, requires_grad=True)
    y = op(x)
    assert y.data_ptr() != x.data_ptr()
    torch.testing.assert_close(y, x)
    torch.testing.assert_close(torch.autograd.grad((y * y).sum(), x)[0], 2 * x)


def test_arguments_it_cannot_pass_are_refused():
    op = pt.wrap(lambda x: x.sum())
    with pytest.raises(pyzyme.UnsupportedError, match="argument 0 .*float16"):
        op(torch.ones(2, dtype=torch.float16))
    with pytest.raises(pyzyme.UnsupportedError, match="argument 0 .*list"):
        op([1.0, 2.0])


def _spectral(x):
    return np.linalg.svd(x)[1].sum()     # LAPACK's SVD: no derivative rule in pyzyme


def test_pyzyme_errors_name_the_kernel_at_the_forward_call():
    op = pt.wrap(_spectral)
    x = torch.rand(3, 3, dtype=F64)
    torch.testing.assert_close(op(x), torch.linalg.svdvals(x).sum())   # no derivative asked
    with pytest.raises(pyzyme.UnsupportedError, match="svd") as info:
        op(x.requires_grad_())              # the derivative is built at the forward call
    assert re.search(r"in Python source: \S*test_torch_wrap\.py:\d+", str(info.value))


def test_pyzyme_errors_name_the_kernel_under_torch_compile():
    op = pt.wrap(_spectral)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: op(x) * 2.0, fullgraph=True, backend="aot_eager")
    x = torch.rand(3, 3, dtype=F64, requires_grad=True)
    # torch.compile raises its own error, which shows the pyzyme error's repr: that holds the
    # kernel's Python line, as the error's str does
    where = r"UnsupportedError.*svd.*in Python source: \S*test_torch_wrap\.py:\d+"
    with pytest.raises(Exception, match=where):
        compiled(x)


def test_each_wrap_registers_operations_of_its_own():
    a, b = pt.wrap(lambda x: 2.0 * x), pt.wrap(lambda x: 3.0 * x)   # same name: <lambda>
    x = torch.ones(2, dtype=F64)
    torch.testing.assert_close(a(x), 2 * x)
    torch.testing.assert_close(b(x), 3 * x)


def test_importing_pyzyme_does_not_import_torch():
    code = "import sys, pyzyme; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# torch.compile ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KERNELS))
def test_compiled_without_graph_breaks(name):
    wrapped, reference = WRAPPED[name], KERNELS[name][1]
    torch._dynamo.reset()

    def step(*args):
        return _loss(wrapped(*args)) * 2.0 + 1.0

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    args = _inputs(name, seed=2)
    inputs = _differentiable(args)
    got = compiled(*args)
    want = _loss(reference(*args)) * 2.0 + 1.0
    torch.testing.assert_close(got, want)
    for g, w in zip(torch.autograd.grad(got, inputs), torch.autograd.grad(want, inputs)):
        torch.testing.assert_close(g, w)


def test_compiled_shapes_come_from_fake():
    calls = []

    def fake(x):
        calls.append(x.shape)
        return torch.empty(x.shape[0] - 1, dtype=F64)
    op = pt.wrap(lambda x: x[1:] - x[:-1], fake=fake)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: op(x) * 2.0, fullgraph=True, backend="aot_eager")
    x = torch.rand(5, dtype=F64, requires_grad=True)
    torch.testing.assert_close(compiled(x), 2.0 * (x[1:] - x[:-1]))
    assert calls


@numba.njit
def _first_n(x):
    return x[:int(x[0])] * 2.0


def test_a_shape_the_guess_got_wrong_is_an_error():
    op = pt.wrap(_first_n)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: op(x) + 1.0, fullgraph=True, backend="aot_eager")
    with pytest.raises(pyzyme.PyzymeError, match="(?s)gave on inputs of ones.*fake="):
        compiled(torch.tensor([3.0, 1.0, 2.0, 5.0], dtype=F64))


def test_compiled_with_inductor():
    torch._dynamo.reset()
    op = WRAPPED["misfit"]

    def step(a, b, s):
        return op(a, b, s) + (a * a).sum()

    compiled = torch.compile(step, fullgraph=True)
    a, b, s = _inputs("misfit", seed=3)
    got = compiled(a, b, s)
    want = misfit_torch(a, b, s) + (a * a).sum()
    torch.testing.assert_close(got, want)
    for g, w in zip(torch.autograd.grad(got, (a, b, s)), torch.autograd.grad(want, (a, b, s))):
        torch.testing.assert_close(g, w)


def test_readme_example():
    """The README's training loop, run as written (200 steps of Adam, about a second): the loss
    falls from 0.57 to under 1e-6 as its last comment says, and the kernel's gradient is the
    one of the same solver written in torch."""
    from tests.doc_blocks import readme_block, run_block
    code = readme_block("pyzyme.torch.wrap")
    assert "for _ in range(200):" in code and "# loss falls from 0.57 to under 1e-6" in code
    scope = run_block(code)
    assert scope["loss"].item() < 1e-6
    raw_k, loss_fn, z, target = scope["raw_k"], scope["loss_fn"], scope["z"], scope["target"]
    (g,) = torch.autograd.grad(loss_fn(), raw_k)
    u0 = scope["net"](z).detach()

    def reference(raw_k, u0):
        return ((diffuse_torch(u0, 0.4 * torch.sigmoid(raw_k), 50) - target) ** 2).mean()
    (want,) = torch.autograd.grad(reference(raw_k, u0), raw_k)
    torch.testing.assert_close(g, want)
    torch.manual_seed(0)            # the untrained model the example starts from
    net = torch.nn.Linear(8, 32, dtype=torch.float64)
    first = reference(torch.zeros((), dtype=torch.float64), net(z).detach()).item()
    assert round(first, 2) == 0.57
