"""Complex numbers in both modes.

Conventions under test (pyzyme.api.args.complex):
- forward: the tangent along a complex direction dz is dRe f + i dIm f (f'(z) dz if holomorphic);
- reverse, real result: Active(z) gives df/dRe + i df/dIm, complex Duplicated arrays accumulate
  the same per element (JAX's grad gives the conjugate);
- ReverseHolomorphic: f'(z) for holomorphic f; plain Reverse refuses a complex result.
Every derivative is checked against central finite differences (real and imaginary parts
perturbed separately) and, where one exists, the analytic value.
"""

from __future__ import annotations

import cmath

import numba
import numpy as np
import pytest

from pyzyme import (
    Active,
    BatchDuplicated,
    Const,
    Duplicated,
    Forward,
    ForwardWithPrimal,
    Reverse,
    ReverseHolomorphic,
    UnsupportedError,
    autodiff,
    grad,
    gradient,
    hvp,
    jacobian,
    value_and_grad,
    vjp,
)

H = 1e-6
Z0 = 0.7 + 0.4j


def fd_real(f, z, h=H):
    """df/dRe + i df/dIm of a real-valued f, by central differences."""
    d_re = (f(z + h) - f(z - h)) / (2 * h)
    d_im = (f(z + 1j * h) - f(z - 1j * h)) / (2 * h)
    return d_re + 1j * d_im


def fd_direction(f, z, dz, h=H):
    """The derivative of f along dz (a complex direction), by central differences."""
    return (f(z + h * dz) - f(z - h * dz)) / (2 * h)


def fd_array_real(f, a, h=H):
    """Per element df/dRe + i df/dIm of a real-valued f of a complex array."""
    out = np.zeros_like(a)
    for k in range(a.size):
        for unit in (1.0, 1j):
            e = np.zeros_like(a)
            e.reshape(-1)[k] = unit * h
            out.reshape(-1)[k] += unit * (f(a + e) - f(a - e)) / (2 * h)
    return out


# -- functions --------------------------------------------------------------------------------
@numba.njit
def abs2(z):
    return abs(z) ** 2


@numba.njit
def re_cube(z):
    return (z * z * z).real


@numba.njit
def exp_mix(z):
    w = np.exp(z)
    return w.real * z.imag + abs(np.sin(z))


@numba.njit
def log_sqrt_mix(z):
    return (np.log(z) * np.sqrt(z)).imag + np.angle(z)


@numba.njit
def cube(z):
    return z ** 3


@numba.njit
def cexp(z):
    return cmath.exp(z)


@numba.njit
def reciprocal(z):
    return 1.0 / z


@numba.njit
def horner(c, z):
    r = 0j
    for i in range(c.size):
        r = r * z + c[i]
    return r


@numba.njit
def sum_cubes(a):
    s = 0j
    for i in range(a.size):
        s += a[i] ** 3
    return s


@numba.njit
def sum_abs2(a):
    return np.sum(np.abs(a) ** 2)


@numba.njit
def re_vdot(a, b):
    s = 0j
    for i in range(a.size):
        s += np.conj(a[i]) * b[i]
    return s.real


@numba.njit
def cpow(z, w):
    return z ** w


@numba.njit
def cube_into(y, x):
    for i in range(x.size):
        y[i] = x[i] ** 3


REAL_FUNCTIONS = [abs2, re_cube, exp_mix, log_sqrt_mix]


# -- reverse mode, real results ---------------------------------------------------------------
@pytest.mark.parametrize("f", REAL_FUNCTIONS, ids=lambda f: f.__name__)
def test_reverse_active_complex_is_d_re_plus_i_d_im(f):
    ((d,),) = autodiff(Reverse, f, Active, Active(Z0))
    assert isinstance(d, complex)
    np.testing.assert_allclose(d, fd_real(f, Z0), rtol=1e-7, atol=1e-8)


def test_reverse_of_real_part_of_holomorphic_is_conjugate_derivative():
    # Cauchy-Riemann: d Re F/dRe + i d Re F/dIm = conj(F'(z)); here F = z**3.
    ((d,),) = autodiff(Reverse, re_cube, Active, Active(Z0))
    np.testing.assert_allclose(d, np.conj(3 * Z0 ** 2), rtol=1e-14)
    ((d,),) = autodiff(Reverse, abs2, Active(Z0))            # |z|^2 -> 2z
    np.testing.assert_allclose(d, 2 * Z0, rtol=1e-14)


@pytest.mark.parametrize("f", REAL_FUNCTIONS, ids=lambda f: f.__name__)
def test_forward_and_reverse_agree_on_real_functions(f):
    # Forward along 1 gives df/dRe, along 1j gives df/dIm.
    (t_re,) = autodiff(Forward, f, Duplicated(Z0, 1.0 + 0j))[1:]
    (t_im,) = autodiff(Forward, f, Duplicated(Z0, 1j))[1:]
    ((d,),) = autodiff(Reverse, f, Active, Active(Z0))
    assert isinstance(t_re, float)
    np.testing.assert_allclose(t_re + 1j * t_im, d, rtol=1e-13, atol=1e-15)


def test_reverse_duplicated_complex_arrays_accumulate():
    a = np.array([1 + 2j, 3 - 1j, 0.5 + 0.5j])
    b = np.array([-1 + 1j, 2 + 0.5j, 0.25 - 3j])
    da = np.full(3, 1 + 1j)                     # accumulated into, not overwritten
    db = np.zeros(3, complex)
    ((none_a, none_b),) = autodiff(Reverse, re_vdot, Active, Duplicated(a, da),
                                   Duplicated(b, db))
    assert none_a is none_b is None
    # Re(sum conj(a) b) = sum(Re a Re b + Im a Im b): the gradient in a is b, in b is a.
    np.testing.assert_allclose(da, 1 + 1j + b, rtol=1e-15)
    np.testing.assert_allclose(db, a, rtol=1e-15)
    np.testing.assert_allclose(db, fd_array_real(lambda x: re_vdot(a, x), b), rtol=1e-8)

    dx = np.zeros(3, complex)
    autodiff(Reverse, sum_abs2, Active, Duplicated(a, dx))
    np.testing.assert_allclose(dx, 2 * a, rtol=1e-14)
    np.testing.assert_allclose(dx, fd_array_real(sum_abs2, a), rtol=1e-8)


def test_reverse_through_complex_memory_written_by_the_function():
    # y = x**3 stored into a Duplicated complex array; seeding dy = 1 means L = sum Re(y), so
    # dx = conj(3 x**2) (and the power goes through numba_cpow, given an IR body).
    x = np.array([0.3 + 0.8j, -1.1 + 0.2j])
    dx = np.zeros(2, complex)
    y = np.zeros(2, complex)
    dy = np.ones(2, complex)
    autodiff(Reverse, cube_into, Const, Duplicated(y, dy), Duplicated(x, dx))
    np.testing.assert_allclose(y, x ** 3, rtol=1e-14)
    np.testing.assert_allclose(dx, np.conj(3 * x ** 2), rtol=1e-13)
    np.testing.assert_array_equal(dy, 0)


# -- forward mode -----------------------------------------------------------------------------
@pytest.mark.parametrize("f, df", [(cube, lambda z: 3 * z ** 2), (cexp, np.exp),
                                   (reciprocal, lambda z: -1 / z ** 2)],
                         ids=["cube", "exp", "reciprocal"])
def test_forward_complex_tangent_is_derivative_times_direction(f, df):
    dz = 0.3 - 1.2j
    primal, t = autodiff(Forward, f, Duplicated, Duplicated(Z0, dz))
    assert primal == f(Z0)
    np.testing.assert_allclose(t, df(Z0) * dz, rtol=1e-13)
    np.testing.assert_allclose(t, fd_direction(f, Z0, dz), rtol=1e-8)


def test_forward_non_holomorphic_complex_result():
    f = numba.njit(lambda z: np.conj(z) * z.imag + abs(z))
    dz = 1 - 2j
    _, t = autodiff(Forward, f, Duplicated(Z0, dz))
    np.testing.assert_allclose(t, fd_direction(f, Z0, dz), rtol=1e-8)


def test_forward_complex_arrays_and_batches():
    a = np.array([1 + 2j, 0.5 - 0.25j, -1 + 0.1j])
    da = np.array([0.5j, 1.0, -1 + 1j])
    primal, t = autodiff(Forward, sum_cubes, Duplicated(a, da))
    np.testing.assert_allclose(primal, np.sum(a ** 3), rtol=1e-14)
    np.testing.assert_allclose(t, np.sum(3 * a ** 2 * da), rtol=1e-13)
    np.testing.assert_allclose(t, fd_direction(sum_cubes, a, da), rtol=1e-8)
    # Two directions at once: along 1 and along 1j.
    _, (t_re, t_im) = autodiff(Forward, abs2, BatchDuplicated(Z0, (1.0, 1j)))
    np.testing.assert_allclose(t_re + 1j * t_im, 2 * Z0, rtol=1e-14)


def test_forward_complex_array_result():
    f = numba.njit(lambda a: a * a + 1j * a)
    a = np.array([1 + 2j, -0.5 + 0.25j])
    da = np.array([1j, 2.0 + 0j])
    primal, t = autodiff(Forward, f, Duplicated(a, da))
    np.testing.assert_allclose(primal, f(a))
    np.testing.assert_allclose(t, (2 * a + 1j) * da, rtol=1e-14)


# -- ReverseHolomorphic ----------------------------------------------------------------------
@pytest.mark.parametrize("f, df", [(cube, lambda z: 3 * z ** 2), (cexp, np.exp),
                                   (reciprocal, lambda z: -1 / z ** 2)],
                         ids=["cube", "exp", "reciprocal"])
def test_holomorphic_gives_the_complex_derivative(f, df):
    ((d,),) = autodiff(ReverseHolomorphic, f, Active, Active(Z0))
    np.testing.assert_allclose(d, df(Z0), rtol=1e-13)
    np.testing.assert_allclose(d, fd_direction(f, Z0, 1.0), rtol=1e-8)
    # The same number forward mode gives along dz = 1.
    np.testing.assert_allclose(d, autodiff(Forward, f, Duplicated(Z0, 1 + 0j))[1], rtol=1e-14)


@pytest.mark.parametrize("f", [
    numba.njit(lambda z: cmath.log(z) * cmath.sqrt(z)),
    numba.njit(lambda z: cmath.atan(z) + cmath.acosh(z)),
    numba.njit(lambda z: cmath.tanh(z) / (1.0 + 2.0j - z)),
    numba.njit(lambda z: z ** (1.5 + 0.5j) + np.expm1(z) * np.log1p(z)),
], ids=["log_sqrt", "atan_acosh", "tanh_div", "cpow_expm1_log1p"])
def test_library_functions_forward_and_holomorphic(f):
    fd = fd_direction(f, Z0, 1.0)
    ((d,),) = autodiff(ReverseHolomorphic, f, Active, Active(Z0))
    np.testing.assert_allclose(d, fd, rtol=1e-8)
    dz = 0.6 - 0.8j
    _, t = autodiff(Forward, f, Duplicated(Z0, dz))
    np.testing.assert_allclose(t, d * dz, rtol=1e-12)


def test_holomorphic_polynomial_in_a_loop():
    c = np.array([1.0 + 0j, -2.0, 0.5j, 3.0, 0.25 - 1j])
    ((none_c, d),) = autodiff(ReverseHolomorphic, horner, Active, Const(c), Active(Z0))
    assert none_c is None
    np.testing.assert_allclose(d, np.polyval(np.polyder(c), Z0), rtol=1e-13)
    # With respect to the coefficients: d/dc_i = z**(n-1-i), added to what dc held.
    dc = np.full(c.size, 2.0 + 0j)
    autodiff(ReverseHolomorphic, horner, Active, Duplicated(c, dc), Const(Z0))
    np.testing.assert_allclose(dc, 2.0 + Z0 ** np.arange(c.size - 1, -1, -1), rtol=1e-13)


def test_holomorphic_array_reduction():
    a = np.array([1 + 2j, 0.5 - 0.25j, -1 + 0.1j])
    da = np.zeros(3, complex)
    autodiff(ReverseHolomorphic, sum_cubes, Active, Duplicated(a, da))
    np.testing.assert_allclose(da, 3 * a ** 2, rtol=1e-13)
    for k in range(a.size):
        e = np.zeros(3, complex)
        e[k] = 1.0
        np.testing.assert_allclose(da[k], fd_direction(sum_cubes, a, e), rtol=1e-8)


def test_holomorphic_power_in_base_and_exponent():
    w0 = 1.5 + 0.5j
    ((dz, dw),) = autodiff(ReverseHolomorphic, cpow, Active, Active(Z0), Active(w0))
    np.testing.assert_allclose(dz, w0 * Z0 ** (w0 - 1), rtol=1e-13)
    np.testing.assert_allclose(dw, Z0 ** w0 * np.log(Z0), rtol=1e-13)
    # At a real exponent the derivative in the exponent is kept (log z * z**w).
    ((_, dw),) = autodiff(ReverseHolomorphic, cpow, Active, Active(Z0), Active(3.0 + 0j))
    np.testing.assert_allclose(dw, Z0 ** 3 * np.log(Z0), rtol=1e-13)


def test_complex_power_primal_is_numbas():
    for z, w in [(Z0, 3.0 + 0j), (-1.2 + 0.3j, 0.5 + 0j), (2.0 + 0j, 1.5 - 0.5j),
                 (0j, 2.5 + 0j), (0j, -1.0 + 0j), (1 + 1j, 0j)]:
        primal, _ = autodiff(ForwardWithPrimal, cpow, Duplicated(z, 1 + 0j), Const(w))
        expected = cpow(z, w)
        assert primal == expected or (np.isnan(primal) and np.isnan(expected)), (z, w)


# -- refusals ---------------------------------------------------------------------------------
def test_reverse_refuses_a_complex_result():
    with pytest.raises(UnsupportedError, match="ReverseHolomorphic"):
        autodiff(Reverse, cube, Active, Active(Z0))
    with pytest.raises(UnsupportedError, match="complex"):
        grad(cube)(Z0)


def test_holomorphic_refusals():
    with pytest.raises(UnsupportedError, match="complex arguments only"):
        autodiff(ReverseHolomorphic, numba.njit(lambda z, x: z * x), Active, Active(Z0),
                 Active(2.0))
    with pytest.raises(UnsupportedError, match="use Reverse for real results"):
        autodiff(ReverseHolomorphic, abs2, Active, Active(Z0))


def test_hvp_and_jacobian_refuse_complex_inputs():
    a = np.array([1 + 2j])
    with pytest.raises(UnsupportedError, match="real arrays"):
        hvp(sum_abs2, a, np.ones(1, complex))
    with pytest.raises(UnsupportedError, match="complex array"):
        jacobian(Forward, numba.njit(lambda x: x * 2.0), a)


# -- convenience layers -----------------------------------------------------------------------
def test_gradient_and_grad_of_real_functions_of_complex_arrays():
    a = np.array([1 + 2j, 3 - 1j, 0.5 + 0.5j])
    expected = 2 * a
    np.testing.assert_allclose(gradient(Reverse, sum_abs2, a), expected, rtol=1e-14)
    np.testing.assert_allclose(gradient(Forward, sum_abs2, a), expected, rtol=1e-14)
    out = np.full(3, 5j)
    assert gradient(Reverse, sum_abs2, a, out=out) is out
    np.testing.assert_allclose(out, expected, rtol=1e-14)
    np.testing.assert_allclose(grad(sum_abs2)(a), expected, rtol=1e-14)
    b = np.array([-1 + 1j, 2 + 0.5j, 0.25 - 3j])
    value, (ga, gb) = value_and_grad(re_vdot, argnums=(0, 1))(a, b)
    assert value == pytest.approx(re_vdot(a, b))
    np.testing.assert_allclose(ga, b, rtol=1e-14)
    np.testing.assert_allclose(gb, a, rtol=1e-14)
    y, vjp_fn = vjp(re_cube, Z0)
    assert y == re_cube(Z0)
    np.testing.assert_allclose(vjp_fn(2.0)[0], 2 * np.conj(3 * Z0 ** 2), rtol=1e-14)


def test_grad_of_a_complex_argument_inside_njit():
    g = grad(exp_mix)

    @numba.njit
    def twice(z):
        return 2.0 * g(z)

    np.testing.assert_allclose(twice(Z0), 2 * fd_real(exp_mix, Z0), rtol=1e-7)


# -- complex64 --------------------------------------------------------------------------------
def test_complex64_in_both_modes():
    z = np.complex64(Z0)
    _, t = autodiff(Forward, cube, Duplicated(z, np.complex64(1.0)))
    np.testing.assert_allclose(t, 3 * Z0 ** 2, rtol=1e-5)
    ((d,),) = autodiff(ReverseHolomorphic, cube, Active, Active(z))
    np.testing.assert_allclose(d, 3 * Z0 ** 2, rtol=1e-5)
    a = np.array([1 + 2j, 0.5 - 0.25j], dtype=np.complex64)
    np.testing.assert_allclose(gradient(Reverse, sum_abs2, a), 2 * a, rtol=1e-6)


# -- type analysis seeds ----------------------------------------------------------------------
def test_complex_arguments_seed_type_analysis_as_floats():
    from numba.core import types
    from numba.core.registry import cpu_target

    from pyzyme.frontends.numba.typeseeds import seed_from_abi
    from pyzyme.frontends.numba.abi import AbiMap

    sig = types.complex128(types.complex64, types.complex128[::1])
    abi = AbiMap.from_signature(cpu_target.target_context, "f", ("z", "a"), sig)
    seeds = seed_from_abi(abi)
    # A complex scalar is two float parameters; a complex array's data holds a float at every
    # offset (real and imaginary parts interleaved); the result is two doubles at 0 and 8.
    assert [str(seeds[abi.args[0].param(f"z.{p}").index]) for p in ("real", "imag")] == \
        ["{[-1]:Float@float}"] * 2
    assert str(seeds[abi.args[1].param("a.data").index]) == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert str(seeds[0]) == "{[-1]:Pointer, [-1,0]:Float@double, [-1,8]:Float@double}"


# -- the README's example ---------------------------------------------------------------------
def test_readme_complex_example():
    from tests.doc_blocks import readme_block, run_block
    block = readme_block("ReverseHolomorphic")
    assert block.count("# ->") == 4
    run_block(block, rel=1e-15)     # (2+4j, -9+12j, ...): what each line's comment shows


# -- split mode --------------------------------------------------------------------------------
def test_split_mode_seed_of_a_complex_result_is_a_cotangent():
    # The thunks take the result's seed w from the user: w = dL/dRe f + i dL/dIm f, i.e.
    # L = Re(conj(w) f), and the derivative is dL/dRe z + i dL/dIm z = conj(f'(z)) w here.
    from pyzyme import ReverseSplitNoPrimal, ReverseSplitWithPrimal, autodiff_thunk

    square = numba.njit(lambda z: z * z)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, square, Active, Active(Z0))
    for w in (1.0 + 0j, 1j, 0.5 - 2j):
        tape, primal, _ = fwd(Active(Z0))
        assert primal == Z0 * Z0
        ((d,),) = rev(Active(Z0), w, tape)
        np.testing.assert_allclose(d, np.conj(2 * Z0) * w, rtol=1e-14)
        np.testing.assert_allclose(d, fd_real(lambda z: (np.conj(w) * z * z).real, Z0),
                                   rtol=1e-8)

    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, re_cube, Active, Active(Z0))

    @numba.njit
    def in_njit(z):
        tape, _, _ = fwd(Active(z))
        return rev(Active(z), 1.0, tape)

    ((d,),) = in_njit(Z0)
    np.testing.assert_allclose(d, np.conj(3 * Z0 ** 2), rtol=1e-14)
