"""The rule table as data: every partial against finite differences, the documented choices at
the points where a derivative needs one, name resolution and coverage.

Each row's primal is written here with Python's ``math`` module, and each gets a sampling
domain (as JAX's ``rng_factory``) where it is smooth: positive for ``log``, ``(-1, 1)`` for
``asin``, away from the jumps of ``fmod``.
"""

from __future__ import annotations

import math
import random
import re
import subprocess
import sys

import pytest

from pyzyme.rules import default_rules, mathlib
from pyzyme.rules.expr import arg, const, evaluate
from pyzyme.rules.spec import Inactive, Linear, Memory, Partials
from pyzyme.rules.table import RuleTable, space_of

RULES = default_rules()
inf, nan = math.inf, math.nan


# -- sampling domains: functions of a random.Random giving one point -------------------------
def uniform(*bounds):
    """Each operand uniform in its (lo, hi)."""
    return lambda rng: tuple(rng.uniform(lo, hi) for lo, hi in bounds)


def reals(n, lo=-3.0, hi=3.0):
    return uniform(*[(lo, hi)] * n)


def nonzero(n, lo=0.1, hi=3.0):
    """Each operand of magnitude in (lo, hi), either sign."""
    return lambda rng: tuple(rng.choice((-1, 1)) * rng.uniform(lo, hi) for _ in range(n))


def float_and_int(lo=-3.0, hi=3.0, n_lo=-4, n_hi=5):
    return lambda rng: (rng.uniform(lo, hi), rng.randint(n_lo, n_hi))


def quotient_between(lo, hi):
    """(x, y) with x / y = k + u, u in (lo, hi): away from the jumps of trunc/rint(x / y)."""
    def sample(rng):
        y = rng.choice((-1, 1)) * rng.uniform(0.5, 3.0)
        return (y * (rng.randint(-5, 5) + rng.uniform(lo, hi)), y)
    return sample


def gamma_domain(rng):
    """Positive, or negative but at least 0.1 from the poles."""
    if rng.random() < 0.5:
        return (rng.uniform(0.1, 8.0),)
    return (-rng.randint(0, 4) - rng.uniform(0.1, 0.9),)


def mantissa_domain(rng):
    """m 2^e with |m| in (0.55, 0.95): frexp's exponent is constant around it."""
    return (rng.choice((-1, 1)) * rng.uniform(0.55, 0.95) * 2.0 ** rng.randint(-5, 5),)


def distinct(rng):
    """Two operands at least 0.1 apart: min/max are smooth there."""
    a = rng.uniform(-3, 3)
    return (a, a + rng.choice((-1, 1)) * rng.uniform(0.1, 2.0))


def fma(a, b, c):
    return a * b + c


# name (or name without "llvm." and the f/l suffix) -> (primal on Python floats, domain)
CASES = {
    "fadd": (lambda a, b: a + b, reals(2)),
    "fsub": (lambda a, b: a - b, reals(2)),
    "fmul": (lambda a, b: a * b, reals(2)),
    "fdiv": (lambda a, b: a / b, lambda rng: reals(1)(rng) + nonzero(1)(rng)),
    "frem": (math.fmod, quotient_between(0.1, 0.9)),
    "fneg": (lambda a: -a, reals(1)),
    "sin": (math.sin, reals(1, -6, 6)),
    "cos": (math.cos, reals(1, -6, 6)),
    "tan": (math.tan, reals(1, -1.4, 1.4)),
    "asin": (math.asin, reals(1, -0.99, 0.99)),
    "acos": (math.acos, reals(1, -0.99, 0.99)),
    "atan": (math.atan, reals(1, -5, 5)),
    # (y, x), away from the origin and from the branch cut y = 0, x < 0.
    "atan2": (math.atan2, lambda rng: nonzero(1)(rng) + reals(1)(rng)),
    "sinh": (math.sinh, reals(1, -5, 5)),
    "cosh": (math.cosh, reals(1, -5, 5)),
    "tanh": (math.tanh, reals(1)),
    "asinh": (math.asinh, reals(1, -5, 5)),
    "acosh": (math.acosh, reals(1, 1.01, 10)),
    "atanh": (math.atanh, reals(1, -0.99, 0.99)),
    "exp": (math.exp, reals(1)),
    "exp2": (lambda a: 2.0 ** a, reals(1)),
    "exp10": (lambda a: 10.0 ** a, reals(1, -2, 2)),
    "expm1": (math.expm1, reals(1)),
    "log": (math.log, reals(1, 0.05, 20)),
    "log2": (math.log2, reals(1, 0.05, 20)),
    "log10": (math.log10, reals(1, 0.05, 20)),
    "log1p": (math.log1p, reals(1, -0.95, 10)),
    "pow": (math.pow, uniform((0.1, 5.0), (-3.0, 3.0))),
    "powi": (lambda a, n: a ** n, lambda rng: nonzero(1, 0.2, 3.0)(rng) + (rng.randint(-4, 5),)),
    "pyzyme.int_power": (mathlib.int_power,
                         lambda rng: (rng.uniform(-3.0, 3.0), rng.choice((0, 1, 2, 5, 9)))),
    # the zero Python's x % y gives for a zero remainder m stands for m: its value moves as m's
    "pyzyme.zero_remainder": (lambda m, zero: m + zero,
                              lambda rng: (rng.uniform(-1e-3, 1e-3), rng.choice((0.0, -0.0)))),
    "sqrt": (math.sqrt, reals(1, 0.01, 10)),
    "cbrt": (math.cbrt, nonzero(1, 0.01, 10)),
    "hypot": (math.hypot, nonzero(2)),
    "erf": (math.erf, reals(1)),
    "erfc": (math.erfc, reals(1)),
    "lgamma": (math.lgamma, gamma_domain),
    "tgamma": (math.gamma, gamma_domain),
    "fmod": (math.fmod, quotient_between(0.1, 0.9)),
    "remainder": (math.remainder, quotient_between(-0.4, 0.4)),
    "fmin": (min, distinct),
    "fmax": (max, distinct),
    "minnum": (min, distinct),
    "maxnum": (max, distinct),
    "minimum": (min, distinct),
    "maximum": (max, distinct),
    "minimumnum": (min, distinct),
    "maximumnum": (max, distinct),
    "fabs": (math.fabs, nonzero(1)),
    "copysign": (math.copysign, nonzero(2)),
    "fma": (fma, reals(3)),
    "fmuladd": (fma, reals(3)),
    "ldexp": (math.ldexp, float_and_int()),
    "scalbn": (math.ldexp, float_and_int()),
    "scalbln": (math.ldexp, float_and_int()),
    # C's frexp(x, int *e): operand 1 is the pointer (None here); llvm.frexp(x) has one operand.
    "frexp": (lambda a, _e: math.frexp(a)[0], lambda rng: mantissa_domain(rng) + (None,)),
    "llvm.frexp": (lambda a: math.frexp(a)[0], mantissa_domain),
    "canonicalize": (lambda a: a, reals(1)),
    "arithmetic.fence": (lambda a: a, reals(1)),
}


def case_for(name: str):
    """The primal and domain of ``name``: itself, or its function without ``llvm.`` or the
    ``f``/``l`` of the float and long double spellings."""
    stem = name.removeprefix("llvm.")
    if stem.startswith("numba_"):  # Numba's helperlib wrappers of C functions
        stem = {"gamma": "tgamma", "gammaf": "tgammaf"}.get(stem[6:], stem[6:])
    for key in (name, stem, stem[:-1] if stem[-1:] in ("f", "l") else None):
        if key in CASES:
            return CASES[key]
    raise KeyError(f"no primal and domain for {name}: add it to CASES")


PARTIAL_NAMES = [(row, name) for row in RULES.rows() if isinstance(row, Partials)
                 for name in row.names]


def central_difference(f, args, i):
    h = 2.0 ** -17 * max(1.0, abs(args[i]))
    up, down = list(args), list(args)
    up[i] += h
    down[i] -= h
    return (f(*up) - f(*down)) / (2.0 * h)


@pytest.mark.parametrize("row, name", PARTIAL_NAMES, ids=[name for _, name in PARTIAL_NAMES])
def test_partials_match_finite_differences(row, name):
    primal, domain = case_for(name)
    rng = random.Random(name)
    for _ in range(6):
        args = domain(rng)
        assert len(args) == row.nargs, f"{name}: the domain gives {len(args)} operands"
        result = primal(*args)
        for i, partial in enumerate(row.partials):
            if partial is None:
                continue
            got = evaluate(partial, args, result)
            want = central_difference(primal, args, i)
            assert math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9), (
                f"d {name}/d operand {i} at {args}: rule {partial} = {got}, "
                f"finite difference {want}")


def _same(a, b):
    return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))


# name, operands, primal result, expected partials (None: no partial): the rows' notes.
SPECIAL_POINTS = [
    ("pow", (0.0, 2.5), 0.0, (0.0, 0.0)),
    ("pow", (0.0, 0.5), 0.0, (inf, 0.0)),
    ("pow", (0.0, -1.0), inf, (-inf, 0.0)),
    ("pow", (0.0, 0.0), 1.0, (0.0, 0.0)),
    ("pow", (3.0, 0.0), 1.0, (0.0, math.log(3.0))),
    ("llvm.pow.f64", (0.0, 2.5), 0.0, (0.0, 0.0)),
    ("llvm.powi.f64.i32", (0.0, 0), 1.0, (0.0, None)),
    ("llvm.powi.f64.i32", (2.0, 3), 8.0, (12.0, None)),
    ("llvm.powi.f64.i32", (2.0, -1), 0.5, (-0.25, None)),
    ("sqrt", (0.0,), 0.0, (inf,)),
    ("llvm.sqrt.f64", (0.0,), 0.0, (inf,)),
    ("cbrt", (0.0,), 0.0, (inf,)),
    ("cbrt", (-0.0,), -0.0, (inf,)),
    ("fabs", (0.0,), 0.0, (1.0,)),
    ("fabs", (-0.0,), 0.0, (-1.0,)),
    ("llvm.fabs.f64", (-0.0,), 0.0, (-1.0,)),
    ("llvm.fabs.f64", (-2.0,), 2.0, (-1.0,)),
    ("fmin", (1.0, 1.0), 1.0, (1.0, 0.0)),
    ("fmax", (1.0, 1.0), 1.0, (1.0, 0.0)),
    ("fmin", (nan, 2.0), 2.0, (0.0, 1.0)),
    ("fmin", (2.0, nan), 2.0, (1.0, 0.0)),
    ("llvm.minnum.f64", (1.0, 1.0), 1.0, (1.0, 0.0)),
    ("llvm.maxnum.f64", (2.0, nan), 2.0, (1.0, 0.0)),
    ("llvm.minimum.f64", (1.0, 1.0), 1.0, (1.0, 0.0)),
    ("llvm.maximum.f64", (-0.0, 0.0), 0.0, (1.0, 0.0)),
    ("llvm.minimum.f64", (2.0, nan), nan, (0.0, 1.0)),
    ("llvm.maximumnum.f64", (nan, 2.0), 2.0, (0.0, 1.0)),
    ("copysign", (-2.0, 3.0), 2.0, (-1.0, None)),
    ("copysign", (2.0, -3.0), -2.0, (-1.0, None)),
    ("copysign", (-0.0, 1.0), 0.0, (-1.0, None)),
    ("fmod", (7.2, 2.0), math.fmod(7.2, 2.0), (1.0, -3.0)),
    ("fmod", (-7.2, 2.0), math.fmod(-7.2, 2.0), (1.0, 3.0)),
    ("frem", (7.2, 2.0), math.fmod(7.2, 2.0), (1.0, -3.0)),
    ("remainder", (7.2, 2.0), math.remainder(7.2, 2.0), (1.0, -4.0)),
    ("atan2", (1.0, 2.0), math.atan2(1.0, 2.0), (0.4, -0.2)),  # (y, x): y first
    ("llvm.atan2.f64", (1.0, 2.0), math.atan2(1.0, 2.0), (0.4, -0.2)),
    ("atan2", (0.0, 0.0), 0.0, (nan, nan)),
    ("hypot", (0.0, 0.0), 0.0, (0.0, 0.0)),
    ("log", (0.0,), -inf, (inf,)),
    ("llvm.log.f64", (0.0,), -inf, (inf,)),
    ("log1p", (-1.0,), -inf, (inf,)),
    ("asin", (1.0,), math.pi / 2, (inf,)),
    ("asin", (-1.0,), -math.pi / 2, (inf,)),
    ("acos", (1.0,), 0.0, (-inf,)),
    ("acos", (-1.0,), math.pi, (-inf,)),
    ("acosh", (1.0,), 0.0, (inf,)),
    ("atanh", (1.0,), inf, (inf,)),
    ("atanh", (-1.0,), -inf, (inf,)),
    ("frexp", (0.0, None), 0.0, (1.0, None)),
    ("llvm.frexp.f64.i32", (0.0,), 0.0, (1.0,)),
    ("llvm.frexp.f64.i32", (5.0,), 0.625, (0.125,)),
    ("lgamma", (-2.0,), inf, (nan,)),
    ("lgamma", (0.0,), inf, (-inf,)),
    ("lgamma", (-0.0,), inf, (inf,)),
    ("tgamma", (-1.0,), nan, (nan,)),
    ("tgamma", (0.0,), inf, (-inf,)),
    ("tgamma", (-0.0,), -inf, (-inf,)),
    ("fdiv", (1.0, 0.0), inf, (inf, -inf)),
]


@pytest.mark.parametrize("name, args, result, expected", SPECIAL_POINTS,
                         ids=[f"{p[0]}{p[1]}" for p in SPECIAL_POINTS])
def test_documented_choices(name, args, result, expected):
    row = RULES.lookup(name, "opcode" if name in ("fdiv", "frem") else "call")
    assert isinstance(row, Partials)
    got = tuple(None if p is None else evaluate(p, args, result) for p in row.partials)
    assert all(_same(g, e) for g, e in zip(got, expected, strict=True)), (name, args, got)


DOCUMENTED = ("pow", "llvm.powi", "sqrt", "cbrt", "fabs", "fmin", "fmax", "llvm.minnum",
              "llvm.maxnum", "llvm.minimum", "llvm.maximum", "copysign", "fmod", "remainder",
              "atan2", "hypot", "log", "asin", "acos", "acosh", "atanh", "frexp", "llvm.frexp",
              "lgamma", "tgamma")


@pytest.mark.parametrize("name", DOCUMENTED)
def test_choices_are_written_in_the_row(name):
    assert RULES.lookup(name, "call").note


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round", "rint", "nearbyint"])
def test_rounding_is_piecewise_constant(name):
    for spelling in (f"llvm.{name}.f64", f"llvm.{name}.v4f32", name, name + "f", name + "l"):
        row = RULES.lookup(spelling, "call")
        assert isinstance(row, Inactive) and "piecewise constant" in row.reason, spelling


# -- names ------------------------------------------------------------------------------------
def test_every_name_resolves_to_its_row():
    for row in RULES.rows():
        for name in row.names:
            assert RULES.lookup(name, space_of(row)) is row, name


@pytest.mark.parametrize("name, base", [
    ("llvm.sin.f32", "llvm.sin"), ("llvm.sin.v4f64", "llvm.sin"), ("sinf", "sin"),
    ("sinl", "sin"), ("llvm.powi.f64.i32", "llvm.powi"), ("llvm.fmuladd.v4f64", "llvm.fmuladd"),
    ("llvm.memcpy.p0.p0.i64", "llvm.memcpy"), ("llvm.memset.p0.i64", "llvm.memset"),
    ("llvm.lifetime.start.p0", "llvm.lifetime.start"), ("llvm.smul.with.overflow.i64", None),
    ("llvm.vector.reduce.add.v4i64", None), ("llvm.experimental.cttz.elts.i64.v32i1", None),
    ("llvm.frexp.f64.i32", "llvm.frexp"), ("llvm.is.fpclass.f64", None),
    ("llvm.vector.reduce.fadd.v4f64", "llvm.vector.reduce.fadd"),
    ("llvm.vector.reduce.fminimum.v16f32", "llvm.vector.reduce.fminimum"),
    ("llvm.masked.load.v4f64.p0", "llvm.masked.load"),
    ("llvm.masked.scatter.v8f32.v8p0", "llvm.masked.scatter"),
])
def test_overloaded_and_spelled_names_resolve(name, base):
    row = RULES.lookup(name)
    assert row is not None, name
    assert base is None or base in row.names


def test_opcodes_and_symbols_are_separate_spaces():
    assert isinstance(RULES.lookup("trunc", "opcode"), Inactive)
    assert RULES.lookup("trunc", "opcode").kind == "opcode"
    assert RULES.lookup("trunc", "call").kind == "libm"
    with pytest.raises(ValueError, match="both an opcode and a symbol"):
        RULES.lookup("trunc")
    assert RULES.lookup("add", "call") is None  # a user function @add is not the instruction
    assert RULES.lookup("sin", "opcode") is None


def test_duplicates_are_rejected_and_the_default_table_is_frozen():
    copy = RuleTable(RULES.rows())
    assert len(copy) == len(RULES)
    with pytest.raises(ValueError, match="sinf has two rules"):
        copy.add(Partials(("sinf",), "libm", (const(1.0),)))
    with pytest.raises(ValueError, match="fmul has two rules"):
        copy.add(Partials(("fmul",), "opcode", (arg(1), arg(0))))
    with pytest.raises(TypeError, match="frozen"):
        RULES.add(Partials(("my_function",), "libm", (const(1.0),)))
    assert default_rules() is RULES


def test_linear_rows_have_their_transposes():
    linear = [row for row in RULES.rows() if isinstance(row, Linear)]
    assert {n for row in linear for n in row.names} >= {"fpext", "fptrunc", "bitcast"}
    for row in linear:
        assert isinstance(RULES.lookup(row.transpose, "opcode"), Linear), row.names


def test_memory_rows():
    assert RULES.lookup("llvm.memcpy.p0.p0.i64").pointer_args == (0, 1)
    assert RULES.lookup("llvm.memmove.p0.p0.i64").pointer_args == (0, 1)
    assert RULES.lookup("llvm.memset.p0.i64").pointer_args == (0,)
    assert all(isinstance(RULES.lookup(n), Memory) for n in ("llvm.memcpy", "llvm.memset"))


def test_every_row_has_a_reason_or_partials():
    for row in RULES.rows():
        if isinstance(row, Inactive):
            assert row.reason, row.names
        if isinstance(row, Linear):
            assert row.transpose, row.names


# -- coverage: the names the forward-mode issue asks for ------------------------------------
OPCODES = """fadd fsub fmul fdiv frem fneg fpext fptrunc bitcast sitofp uitofp fptosi fptoui add sub
mul udiv sdiv urem srem shl lshr ashr and or xor icmp fcmp trunc zext sext ptrtoint inttoptr
ptrtoaddr addrspacecast""".split()
STRUCTURAL = "freeze select phi extractvalue insertvalue extractelement insertelement " \
             "shufflevector getelementptr load store alloca call".split()
INTRINSICS = """sqrt sin cos tan exp exp2 exp10 log log2 log10 pow powi fabs copysign fma fmuladd
minnum maxnum minimum maximum floor ceil trunc round rint nearbyint asin acos atan atan2 sinh cosh
tanh ldexp frexp memcpy memmove memset lifetime.start lifetime.end assume dbg.value dbg.declare
dbg.assign dbg.label experimental.noalias.scope.decl invariant.start invariant.end stacksave
stackrestore prefetch expect smax smin umax umin abs sadd.with.overflow uadd.with.overflow
ssub.with.overflow usub.with.overflow smul.with.overflow umul.with.overflow ctpop ctlz cttz
is.fpclass""".split()
LIBM = """sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 expm1 log log10
log2 log1p pow sqrt cbrt hypot erf erfc lgamma tgamma fmod remainder fmin fmax fabs copysign
exp10 ldexp frexp scalbn""".split()


def test_coverage_of_the_issue_list():
    missing = [n for n in OPCODES if RULES.lookup(n, "opcode") is None]
    missing += [f"llvm.{n}" for n in INTRINSICS if RULES.lookup(f"llvm.{n}", "call") is None]
    missing += [s for n in LIBM for s in (n, n + "f", n + "l")
                if RULES.lookup(s, "call") is None]
    assert not missing
    assert not [n for n in STRUCTURAL if RULES.lookup(n, "opcode") is not None]


def test_row_kinds_match_their_names():
    for row in RULES.rows():
        for name in row.names:
            assert name.startswith("llvm.") == (row.kind == "intrinsic"), name


def test_rule_count():
    out = subprocess.run([sys.executable, "-m", "pyzyme.rules"], capture_output=True,
                         text=True, check=True).stdout
    rows, names = map(int, re.match(r"(\d+) rows answering to (\d+) names", out).groups())
    assert rows == len(RULES) and names == sum(len(r.names) for r in RULES.rows())


def test_runtime_rows_state_memory_effects():
    """The runtime's memory facts are the rows' (analysis.overwrite and the generators read
    them): each BLAS/LAPACK helper writes pointer arguments, a bilinear one's operands are not
    among them; what releases or counts references is a Mirror row; MemInfo allocators
    say where the data pointer is, as MEMINFO_LAYOUT does."""
    from pyzyme.rules.runtime import MEMINFO_DATA, MEMINFO_LAYOUT
    from pyzyme.rules.spec import Allocation, Blas, Mirror

    assert ("data", MEMINFO_DATA, True) in MEMINFO_LAYOUT
    for row in RULES.rows():
        if isinstance(row, Blas):
            assert row.writes and not set(row.operands) & set(row.writes), row.names
            assert len(row.operands) in (0, 2), row.names
        if isinstance(row, Allocation) and row.data_offset is not None:
            assert row.data_offset == MEMINFO_DATA, row.names
        if isinstance(row, Mirror) and (row.refcount or row.null_ok):
            assert row.pointer_args == (0,), row.names
    releases = {n for r in RULES.rows() if isinstance(r, Mirror) and r.releases for n in r.names}
    assert releases == {"NRT_decref", "NRT_MemInfo_call_dtor", "NRT_Free", "free"}
