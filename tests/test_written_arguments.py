"""Which constant arrays a build refused for an array merged with shadowed memory needs zero
shadows of (pyzyme.frontends.numba.written.arrays_needing_shadows): the parameter the error
names, and nothing for a merge that is not a parameter (an instruction: the exception records
a prange body merges), which crashed on an instruction's missing parameter index."""

from types import SimpleNamespace

from numba.core import types

from pyzyme.frontends.numba.written import arrays_needing_shadows
from pyzyme.ir import types as T
from pyzyme.ir.values import Argument


def _abi():
    array = SimpleNamespace(numba_type=types.float64[:], params=[SimpleNamespace(index=2)])
    scalar = SimpleNamespace(numba_type=types.float64, params=[SimpleNamespace(index=9)])
    return SimpleNamespace(args=[array, scalar])


def test_the_merged_parameter_names_its_array():
    native = SimpleNamespace()
    merged = Argument(native, T.ptr, 2, "arg.c.0")
    assert arrays_needing_shadows(_abi(), native, (False, False), (True, True), merged) == (0,)
    # another function's parameter of that index is not this one's
    other = Argument(SimpleNamespace(), T.ptr, 2, "arg.c.0")
    assert arrays_needing_shadows(_abi(), native, (False, False), (True, True), other) == ()


def test_a_merge_that_is_no_parameter_names_no_array():
    native = SimpleNamespace()
    instruction = SimpleNamespace(function=native)   # has a function, no parameter index
    assert arrays_needing_shadows(_abi(), native, (False, False), (True, True),
                                  instruction) == ()
    # arrays the function writes are still named
    assert arrays_needing_shadows(_abi(), native, (True, False), (True, True),
                                  instruction) == (0,)
