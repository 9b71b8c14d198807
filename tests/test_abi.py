"""AbiMap: how Numba flattens arguments and returns results, read off its data model."""

from __future__ import annotations

import textwrap
from collections import namedtuple

import numba
import numpy as np
import pytest
from numba import njit, types
from numba.core.registry import cpu_target

import pyzyme  # noqa: F401  (installs the capture hook)
from pyzyme.errors import CaptureError
from pyzyme.frontends.numba import AbiMap, capture

Point = namedtuple("Point", ["x", "y"])
RECORD = np.dtype([("mass", np.float64), ("charge", np.int32)], align=True)
STATUS = "  status 0 ok | -1 error set | -2 None | -3 StopIteration | >=1 user exception (*excinfo)"


def abi_text(name, arg_names, signature) -> str:
    return str(AbiMap.from_signature(cpu_target.target_context, name, arg_names, signature))


def expected(text: str) -> str:
    return textwrap.dedent(text).strip("\n") + "\n" + STATUS


def test_array_and_scalar_returning_none():
    assert abi_text("scale", ("a", "k"), types.none(types.float64[::1], types.float64)) == expected(
        """
        AbiMap of scale(a, k)
          signature (array(float64, 1d, C), float64) -> none
          native i32 (ptr retptr, ptr excinfo, ptr, ptr, i64, i64, ptr, i64, i64, double)
          arg 0 a: array(float64, 1d, C) [array]
            #2   ptr     a.meminfo     %arg.a.0    meminfo(float64)
            #3   ptr     a.parent      %arg.a.1    pyobject
            #4   i64     a.nitems      %arg.a.2    int64
            #5   i64     a.itemsize    %arg.a.3    int64
            #6   ptr     a.data        %arg.a.4    float64*
            #7   i64     a.shape[0]    %arg.a.5.0  int64
            #8   i64     a.strides[0]  %arg.a.6.0  int64 (bytes)
          arg 1 k: float64 [scalar]
            #9   double  k             %arg.k      float64
          result none [none]: retptr -> 8 bytes
            (a null pointer is stored)
        """
    )


def test_two_dimensional_any_layout_array():
    assert abi_text("trace", ("m",), types.float64(types.float32[:, :])) == expected(
        """
        AbiMap of trace(m)
          signature (array(float32, 2d, A)) -> float64
          native i32 (ptr retptr, ptr excinfo, ptr, ptr, i64, i64, ptr, i64, i64, i64, i64)
          arg 0 m: array(float32, 2d, A) [array]
            #2   ptr     m.meminfo     %arg.m.0    meminfo(float32)
            #3   ptr     m.parent      %arg.m.1    pyobject
            #4   i64     m.nitems      %arg.m.2    int64
            #5   i64     m.itemsize    %arg.m.3    int64
            #6   ptr     m.data        %arg.m.4    float32*
            #7   i64     m.shape[0]    %arg.m.5.0  int64
            #8   i64     m.shape[1]    %arg.m.5.1  int64
            #9   i64     m.strides[0]  %arg.m.6.0  int64 (bytes)
            #10  i64     m.strides[1]  %arg.m.6.1  int64 (bytes)
          result float64 [scalar]: retptr -> 8 bytes
            +0    double  result  float64
        """
    )


def test_tuple_namedtuple_and_complex():
    sig = types.complex128(
        types.Tuple((types.float64, types.int64)), numba.typeof(Point(1.0, 2.0)), types.complex128
    )
    assert abi_text("mix", ("t", "p", "z"), sig) == expected(
        """
        AbiMap of mix(t, p, z)
          signature (Tuple(float64, int64), Point(float64 x 2), complex128) -> complex128
          native i32 (ptr retptr, ptr excinfo, double, i64, double, double, double, double)
          arg 0 t: Tuple(float64, int64) [tuple]
            #2   double  t[0]    %arg.t.0  float64
            #3   i64     t[1]    %arg.t.1  int64
          arg 1 p: Point(float64 x 2) [tuple]
            #4   double  p.x     %arg.p.0  float64
            #5   double  p.y     %arg.p.1  float64
          arg 2 z: complex128 [complex]
            #6   double  z.real  %arg.z.0  float64
            #7   double  z.imag  %arg.z.1  float64
          result complex128 [complex]: retptr -> 16 bytes
            +0    double  result.real  float64
            +8    double  result.imag  float64
        """
    )


def test_record_and_bool_returning_unituple():
    sig = types.UniTuple(types.float64, 2)(numba.from_dtype(RECORD), types.boolean)
    rec = "Record(mass[type=float64;offset=0],charge[type=int32;offset=8];16;True)"
    assert abi_text("weigh", ("r", "flag"), sig) == expected(
        f"""
        AbiMap of weigh(r, flag)
          signature ({rec}, bool) -> UniTuple(float64 x 2)
          native i32 (ptr retptr, ptr excinfo, ptr, i8)
          arg 0 r: {rec} [record]
            #2   ptr     r     %arg.r     {rec}
          arg 1 flag: bool [bool]
            #3   i8      flag  %arg.flag  bool
          result UniTuple(float64 x 2) [tuple]: retptr -> 16 bytes
            +0    double  result[0]  float64
            +8    double  result[1]  float64
        """
    )


def test_optional_argument_and_result():
    opt = types.Optional(types.float64)
    assert abi_text("maybe", ("x",), opt(opt)) == expected(
        """
        AbiMap of maybe(x)
          signature (OptionalType(float64)) -> OptionalType(float64)
          native i32 (ptr retptr, ptr excinfo, double, i8)
          arg 0 x: OptionalType(float64) [optional]
            #2   double  x.data   %arg.x.0  float64
            #3   i8      x.valid  %arg.x.1  bool
          result OptionalType(float64) [optional]: retptr -> 8 bytes
            +0    double  result  float64
            (None is status -2, with retptr unwritten)
        """
    )


def test_array_result_and_mixed_tuple_result():
    assert abi_text("make", ("n",), types.float64[::1](types.intp)) == expected(
        """
        AbiMap of make(n)
          signature (int64) -> array(float64, 1d, C)
          native i32 (ptr retptr, ptr excinfo, i64)
          arg 0 n: int64 [scalar]
            #2   i64     n  %arg.n  int64
          result array(float64, 1d, C) [array]: retptr -> 56 bytes
            +0    ptr     result.meminfo     meminfo(float64)
            +8    ptr     result.parent      pyobject
            +16   i64     result.nitems      int64
            +24   i64     result.itemsize    int64
            +32   ptr     result.data        float64*
            +40   i64     result.shape[0]    int64
            +48   i64     result.strides[0]  int64 (bytes)
            (the caller owns a reference to result.meminfo)
        """
    )
    mixed = AbiMap.from_signature(
        cpu_target.target_context,
        "f",
        ("x",),
        types.Tuple((types.boolean, types.int32, types.float64))(types.float64),
    )
    assert [(f.offset, f.llvm_type, f.field) for f in mixed.result.fields] == [
        (0, "i8", "result[0]"),
        (4, "i32", "result[1]"),
        (8, "double", "result[2]"),
    ]
    assert mixed.result.size == 16 and mixed.result.llvm_type == "{i8, i32, double}"


def test_lookup_helpers():
    abi = AbiMap.from_signature(
        cpu_target.target_context, "f", ("a", "b"), types.none(types.int32[:, ::1], types.int8)
    )
    assert abi.arg("a").param("a.shape[1]").index == 8
    assert abi.arg("a").param("a.data").numba_type == types.CPointer(types.int32)
    assert abi.arg("b").params[0].llvm_type == "i8" and abi.arg("b").params[0].index == 11
    assert [p.index for p in abi.native_params] == list(range(2, 12))
    with pytest.raises(KeyError, match="no field 'a.shape'"):
        abi.arg("a").param("a.shape")
    with pytest.raises(KeyError):
        abi.arg("c")


@njit
def weighted(a, w, t, z, r, flag):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += a[i, j] * w
    if flag:
        s += t[0] * t[1]
    return s + z.real + r.mass


def test_map_matches_the_captured_native_function():
    args = (np.ones((2, 3)), 2.0, (1.5, 2), 1 + 1j, np.zeros(1, dtype=RECORD)[0], True)
    cap = capture(weighted, args)
    fn = cap.llvm_module().get_function(cap.symbol)
    params = list(fn.arguments)
    assert [p.name for p in params[:2]] == ["retptr", "excinfo"]
    # Numba's parameter names agree with the map's, field by field.
    assert [p.name for p in params[2:]] == [p.ir_name for p in cap.abi.native_params]
    assert [str(p.type) for p in params[2:]] == [p.llvm_type for p in cap.abi.native_params]
    assert cap.abi.arg("t").param("t[1]").llvm_type == "i64"
    assert cap.abi.arg("flag").param("flag").llvm_type == "i8"


def test_check_function_rejects_a_different_function():
    a = capture(
        weighted, (np.ones((2, 3)), 2.0, (1.5, 2), 1 + 1j, np.zeros(1, dtype=RECORD)[0], True)
    )
    b = capture(
        weighted, (np.ones((2, 3)), 2.0, (1.5, 2.5), 1 + 1j, np.zeros(1, dtype=RECORD)[0], True)
    )
    a.abi.check_function(a.llvm_module().get_function(a.symbol))
    with pytest.raises(
        CaptureError, match=r"native function of weighted has parameters .*Numba's data model says"
    ):
        a.abi.check_function(b.llvm_module().get_function(b.symbol))


def test_unsupported_types_are_named():
    ctx = cpu_target.target_context
    typed_list = types.ListType(types.float64)
    with pytest.raises(CaptureError) as err:
        AbiMap.from_signature(ctx, "f", ("s",), types.float64(typed_list))
    assert "argument 's' of f" in str(err.value) and "ListType" in str(err.value)
    with pytest.raises(CaptureError,
                       match=r"element 1 of argument 't' of f: it is a numba.typed.List \(ListType"):
        AbiMap.from_signature(
            ctx, "f", ("t",), types.float64(types.Tuple((types.float64, typed_list)))
        )
    with pytest.raises(CaptureError, match="the result of f"):  # strings only as arguments
        AbiMap.from_signature(ctx, "f", ("x",), types.unicode_type(types.float64))
    with pytest.raises(CaptureError, match="the result of f"):
        AbiMap.from_signature(ctx, "f", ("x",), types.List(types.float64)(types.float64))
    with pytest.raises(CaptureError, match="2 parameters but the signature has 1"):
        AbiMap.from_signature(ctx, "f", ("x", "y"), types.float64(types.float64))
