"""Custom rules (pyzyme.rules): EnzymeRules for @njit functions, in both modes.

Every ruled function here is defined in this file and ruled once: the registry is
process-wide, as a Julia method table is, so a function without rules is a separate function.
"""

import ctypes
import ctypes.util
import math

import numba
import numpy as np
import pytest

from pyzyme import (
    Active,
    BatchDuplicated,
    Const,
    Duplicated,
    Forward,
    Reverse,
    ReverseSplitWithPrimal,
    UnsupportedError,
    ActivityError,
    autodiff,
    autodiff_thunk,
    gradient,
    rules,
)
from pyzyme.rules import RuleError
from pyzyme.testing import test_forward as check_forward
from pyzyme.testing import test_reverse as check_reverse


def central(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


# -- a numerically poor derivative replaced: softplus at large x ---------------------------------
@numba.njit
def softplus(x):
    return math.log(1.0 + math.exp(x))


@numba.njit
def sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@numba.njit
def stable_softplus(x):
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


@numba.njit
def softplus_loss(x, w):
    return w * softplus(x)


def test_rule_registered_after_compiling_replaces_a_poor_derivative():
    # The body's own derivative at x = 800 is exp(800) / (1 + exp(800)) = inf / inf.
    before = autodiff(Reverse, softplus_loss, Active(800.0), Const(2.0))[0][0]
    assert math.isnan(before)
    assert math.isnan(autodiff(Forward, softplus_loss, Duplicated(800.0, 1.0), Const(2.0))[1])

    @rules.forward(softplus)
    @numba.njit
    def softplus_fwd(config, x, dx):
        return stable_softplus(x), dx * sigmoid(x)

    @rules.augmented_primal(softplus)
    @numba.njit
    def softplus_aug(config, x, dx):
        return stable_softplus(x), None, sigmoid(x)

    @rules.reverse(softplus)
    @numba.njit
    def softplus_rev(config, dret, tape, x, dx):
        return dret * tape

    # The derivatives compiled above are stale now: the rule is used, in both modes.
    assert autodiff(Reverse, softplus_loss, Active(800.0), Const(2.0))[0][0] == 2.0
    # The primal comes from the rule as well (the body's log(1 + exp(800)) is inf).
    assert autodiff(Forward, softplus_loss, Duplicated(800.0, 1.0), Const(2.0)) == (1600.0,
                                                                                     2.0)
    for x in (-3.0, 0.2, 5.0):
        expected = 2.0 * sigmoid(x)
        assert autodiff(Reverse, softplus_loss, Active(x), Const(2.0))[0][0] == \
            pytest.approx(expected, rel=1e-14)
        assert autodiff(Forward, softplus_loss, Duplicated(x, 1.0), Const(2.0))[1] == \
            pytest.approx(expected, rel=1e-14)
    check_forward(softplus_loss, Duplicated, 0.7, (1.5, Duplicated))
    check_reverse(softplus_loss, Active, 0.7, (1.5, Active))


# -- an array rule: logsumexp with its softmax adjoint, inside a loop ------------------------------
@numba.njit
def logsumexp(x):
    m = x.max()
    s = 0.0
    for i in range(x.size):
        s += math.exp(x[i] - m)
    return m + math.log(s)


@rules.forward(logsumexp)
@numba.njit
def logsumexp_fwd(config, x, dx):
    y = logsumexp(x)
    t = 0.0
    for i in range(x.size):
        t += math.exp(x[i] - y) * dx[i]
    return y, t


@rules.augmented_primal(logsumexp)
@numba.njit
def logsumexp_aug(config, x, dx):
    y = logsumexp(x)
    # x may be overwritten before the reverse rule runs: keep the softmax, not x.
    return y, None, np.exp(x - y) if config.overwritten[0] else np.empty(0)


@rules.reverse(logsumexp)
@numba.njit
def logsumexp_rev(config, dret, softmax, x, dx):
    if dx is not None:
        for i in range(dx.size):
            dx[i] += dret * softmax[i]
    return None


@numba.njit
def scaled_lse(x, w, k):
    out = 0.0
    for j in range(k):
        out += w * logsumexp(x * (j + 1.0))
    return out


def softmax(v):
    e = np.exp(v - v.max())
    return e / e.sum()


def test_array_rule_in_a_loop_both_modes():
    x = np.array([0.1, 0.5, -0.3, 2.0])
    dx = np.zeros(4)
    (d,) = autodiff(Reverse, scaled_lse, Active, Duplicated(x, dx), Active(1.5), Const(3))
    expected = 1.5 * sum((j + 1) * softmax((j + 1) * x) for j in range(3))
    np.testing.assert_allclose(dx, expected, rtol=1e-13)
    assert d[1] == pytest.approx(sum(logsumexp((j + 1) * x) for j in range(3)), rel=1e-14)
    np.testing.assert_allclose(gradient(Forward, lambda v: scaled_lse(v, 1.5, 3), x), expected,
                               rtol=1e-13)
    check_forward(scaled_lse, Duplicated, x, 1.5, 3)
    check_reverse(scaled_lse, Active, x, 1.5, 3)


def test_rule_stays_finite_where_the_body_overflows():
    x = np.array([1000.0, 999.0])  # logsumexp itself is stable; its rule must be too
    g = gradient(Reverse, lambda v: scaled_lse(v, 1.0, 1), x)
    np.testing.assert_allclose(g, softmax(x), rtol=1e-12)


# -- a rule for a function whose body pyzyme cannot see: a C function through ctypes -----------
_libm = ctypes.CDLL(ctypes.util.find_library("m") or None)
_cbrt = _libm.cbrt
_cbrt.argtypes = [ctypes.c_double]
_cbrt.restype = ctypes.c_double


@numba.njit
def cbrt_plain(x):
    return _cbrt(x)


@numba.njit
def cbrt(x):
    return _cbrt(x)


@rules.forward(cbrt)
@numba.njit
def cbrt_fwd(config, x, dx):
    y = _cbrt(x)
    return y, dx / (3.0 * y * y)


@rules.augmented_primal(cbrt)
@numba.njit
def cbrt_aug(config, x, dx):
    y = _cbrt(x)
    return y, None, y


@rules.reverse(cbrt)
@numba.njit
def cbrt_rev(config, dret, y, x, dx):
    return dret / (3.0 * y * y)


@numba.njit
def uses_cbrt_plain(x):
    return cbrt_plain(x * x) + x


@numba.njit
def cbrt_sum(x, a):
    s = 0.0
    for i in range(a.size):
        s += cbrt(x + a[i]) * a[i]
    return s


def test_external_function_without_a_rule_is_refused():
    with pytest.raises(UnsupportedError, match="custom rule"):
        autodiff(Reverse, uses_cbrt_plain, Active(2.0))
    with pytest.raises(UnsupportedError, match="custom rule"):
        autodiff(Forward, uses_cbrt_plain, Duplicated(2.0, 1.0))


def test_external_function_with_a_rule():
    a = np.array([1.0, 2.5, 7.0])
    x = 0.8
    expected = central(lambda v: cbrt_sum(v, a), x)
    assert autodiff(Reverse, cbrt_sum, Active(x), Const(a))[0][0] == pytest.approx(expected,
                                                                                   rel=1e-8)
    assert autodiff(Forward, cbrt_sum, Duplicated(x, 1.0), Const(a))[1] == \
        pytest.approx(expected, rel=1e-8)
    check_forward(cbrt_sum, Duplicated, x, Const(a))
    check_reverse(cbrt_sum, Active, x, Const(a))


# -- rules reached through callees, and batch mode -----------------------------------------------
@numba.njit
def twice_cbrt(x):
    return 2.0 * cbrt(x)


@numba.njit
def through_callee(x):
    return twice_cbrt(x) + twice_cbrt(x * x + 1.0)


def test_rule_reached_through_a_callee():
    x = 1.3
    expected = central(through_callee, x)
    assert autodiff(Reverse, through_callee, Active(x))[0][0] == pytest.approx(expected, rel=1e-8)
    assert autodiff(Forward, through_callee, Duplicated(x, 1.0))[1] == pytest.approx(expected,
                                                                                     rel=1e-8)


def test_one_tangent_rule_serves_batch_mode():
    x = 1.3
    primal, (d1, d2) = autodiff(Forward, through_callee, BatchDuplicated,
                                BatchDuplicated(x, (1.0, -2.0)))
    assert primal == through_callee(x)
    expected = central(through_callee, x)
    assert (d1, d2) == (pytest.approx(expected, rel=1e-8), pytest.approx(-2 * expected, rel=1e-8))


# -- a rule returning an array (its shadow and tape hold references) -----------------------------
@numba.njit
def vexp(x):
    return np.exp(x)


@rules.forward(vexp)
@numba.njit
def vexp_fwd(config, x, dx):
    y = np.exp(x)
    return y, dx * y


@rules.augmented_primal(vexp)
@numba.njit
def vexp_aug(config, x, dx):
    y = np.exp(x)
    dy = np.zeros_like(y)
    return y, dy, (y, dy)


@rules.reverse(vexp)
@numba.njit
def vexp_rev(config, dret, tape, x, dx):
    y, dy = tape
    if dx is not None:
        dx += dy * y
    return None


@numba.njit
def exp_energy(x):
    y = vexp(x * 2.0)
    return (y * y).sum()


def test_array_result_rule_releases_what_it_returned(nrt_stats):
    x = np.array([0.1, 0.5, -0.3])
    expected = 4.0 * np.exp(4.0 * x)
    np.testing.assert_allclose(gradient(Reverse, exp_energy, x), expected, rtol=1e-14)
    np.testing.assert_allclose(gradient(Forward, exp_energy, x), expected, rtol=1e-14)
    before = nrt_stats()
    for _ in range(20):
        gradient(Reverse, exp_energy, x)
        gradient(Forward, exp_energy, x)
    after = nrt_stats()
    assert after.alloc - before.alloc == after.free - before.free
    assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free
    check_reverse(exp_energy, Active, x)


# -- inactive functions: logging and random numbers ------------------------------------------------
@numba.njit
def record_plain(log, i, x):
    log[i] = x


@numba.njit
def record(log, i, x):
    log[i] = x


rules.inactive(record)


@numba.njit
def logged_plain(x, log):
    y = x * x
    record_plain(log, 0, y)
    return y * x


@numba.njit
def logged(x, log):
    y = x * x
    record(log, 0, y)
    return y * x


@numba.njit
def noise(scale):
    return scale * np.random.random()


rules.inactive_noinline(noise)


@numba.njit
def jittered(x):
    return x * x + noise(x)


def test_logging_into_const_memory_needs_inactive():
    with pytest.raises(ActivityError):
        autodiff(Reverse, logged_plain, Active(1.5), Const(np.zeros(1)))
    log = np.zeros(1)
    assert autodiff(Reverse, logged, Active(1.5), Const(log))[0][0] == pytest.approx(3 * 1.5**2)
    assert log[0] == 1.5**2  # the call was made
    assert autodiff(Forward, logged, Duplicated(1.5, 1.0), Const(log))[1] == \
        pytest.approx(3 * 1.5**2)


def test_random_numbers_marked_inactive():
    assert autodiff(Reverse, jittered, Active(0.7))[0][0] == pytest.approx(1.4, rel=1e-15)
    assert autodiff(Forward, jittered, Duplicated(0.7, 1.0))[1] == pytest.approx(1.4, rel=1e-15)


# -- what a user gets wrong ------------------------------------------------------------------------
@numba.njit
def only_forward(x):
    return x * 3.0


@rules.forward(only_forward)
@numba.njit
def only_forward_fwd(config, x, dx):
    return 3.0 * x, 3.0 * dx


@numba.njit
def wrong_type(x):
    return x * 3.0


@rules.forward(wrong_type)
@numba.njit
def wrong_type_fwd(config, x, dx):
    return 3.0 * x, 3


@numba.njit
def raising(x):
    return math.sqrt(x)


@rules.forward(raising)
@numba.njit
def raising_fwd(config, x, dx):
    if x < 0.0:
        raise ValueError("raising needs x >= 0")
    y = math.sqrt(x)
    return y, dx / (2.0 * y)


def test_missing_rule_names_what_to_register():
    assert autodiff(Forward, only_forward, Duplicated(2.0, 1.0)) == (6.0, 3.0)
    with pytest.raises(UnsupportedError, match="augmented_primal and rules.reverse"):
        autodiff(Reverse, only_forward, Active(2.0))


def test_rule_returning_the_wrong_type_is_refused():
    with pytest.raises(RuleError, match="of wrong_type returns .*int.* as the tangent; "
                                        "expected float64"):
        autodiff(Forward, wrong_type, Duplicated(2.0, 1.0))


def test_exception_raised_in_a_rule_propagates():
    assert autodiff(Forward, raising, Duplicated(4.0, 1.0)) == (2.0, 0.25)
    with pytest.raises(ValueError, match="raising needs x >= 0"):
        autodiff(Forward, raising, Duplicated(-4.0, 1.0))


def test_rules_attach_to_njit_functions_only():
    with pytest.raises(TypeError, match="@numba.njit"):
        rules.forward(lambda x: x)
    with pytest.raises(TypeError, match="@numba.njit"):
        rules.inactive(math.sin)


def test_split_mode_uses_the_rules():
    x = np.array([0.1, 0.5, -0.3, 2.0])
    dx = np.zeros(4)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, scaled_lse, Active, Duplicated(x, dx),
                              Active(1.5), Const(2))
    tape, primal, _ = fwd(Duplicated(x, dx), Active(1.5), Const(2))
    assert primal == pytest.approx(scaled_lse(x, 1.5, 2), rel=1e-14)
    x[:] = 0.0  # overwritten between the sweeps: the rule kept what it needs
    (_, dw, _), = rev(Duplicated(x, dx), Active(1.5), Const(2), 1.0, tape)
    x0 = np.array([0.1, 0.5, -0.3, 2.0])
    np.testing.assert_allclose(dx, 1.5 * (softmax(x0) + 2 * softmax(2 * x0)), rtol=1e-13)
    assert dw == pytest.approx(logsumexp(x0) + logsumexp(2 * x0), rel=1e-14)


def test_registry_prints_the_rules():
    text = str(rules.REGISTRY)
    assert "logsumexp: forward, augmented_primal, reverse" in text
    assert "record: inactive" in text
    assert "noise: inactive (noinline)" in text


def test_second_order_goes_through_the_rule_bodies():
    from pyzyme import hvp

    x = np.array([0.1, 0.5, -0.3])
    v = np.array([1.0, -1.0, 0.5])
    s = softmax(x)
    np.testing.assert_allclose(hvp(lambda z: scaled_lse(z, 1.0, 1), x, v),
                               (np.diag(s) - np.outer(s, s)) @ v, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(hvp(exp_energy, x, v), 16.0 * np.exp(4.0 * x) * v, rtol=1e-13)


def test_inactive_functions_may_be_inlined_after_differentiation():
    from pyzyme import code_llvm
    from pyzyme.ir import parse_module

    def attributes(text, name):
        module = parse_module(text)
        groups = dict(line.split(" = ", 1) for kind, line in module.extra_lines
                      if kind == "attributes")
        fn = next(fn for fn in module.functions if name in fn.name and not fn.is_declaration)
        words = fn.suffix.split()
        return words + [a for w in words if w.startswith("#")
                        for a in groups[f"attributes {w}"].strip("{} ").split()]

    # record (inactive) was kept a call for the generators, then released for LLVM to inline;
    # noise (inactive_noinline) stays a call.
    text = code_llvm(Reverse, logged, Active, Active(1.5), Const(np.zeros(1)))
    assert "noinline" not in attributes(text, "6record")
    text = code_llvm(Reverse, jittered, Active, Active(0.7))
    assert "noinline" in attributes(text, "5noise")


# -- what pyzyme makes of a ruled function lives in its registries, not on the function ---------
@numba.njit
def cubed(x):
    return x * x * x


@numba.njit
def unrelated_identity(x):
    return x


def test_a_ruled_function_and_its_rules_get_no_attribute():
    def cubed_fwd(config, x, dx):     # plain Python: pyzyme compiles it with numba.njit
        return x * x * x, 3.0 * x * x * dx

    rules.forward(cubed)(cubed_fwd)
    assert autodiff(Forward, cubed, Duplicated(2.0, 1.0)) == pytest.approx((8.0, 12.0))
    rules.inactive(unrelated_identity)   # a registration: derivatives are built again
    # ... and the rule keeps its one dispatcher, so the rebuilt derivative is the same code
    assert autodiff(Forward, cubed, Duplicated(2.0, 1.0)) == pytest.approx((8.0, 12.0))
    assert not [k for k in vars(cubed) if "pyzyme" in k]   # no caller kept on the dispatcher
    assert vars(cubed_fwd) == {}                             # no dispatcher kept on the rule
