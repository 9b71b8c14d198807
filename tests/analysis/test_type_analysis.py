"""Type analysis on hand-written IR and on functions captured from Numba, by printed forms."""

import re
import threading

import numpy as np
import pytest

from pyzyme import ir
from pyzyme.analysis.layout import alignof, field_offset, sizeof
from pyzyme.frontends.numba.typeseeds import seed_from_abi
from pyzyme.analysis import type_runs
from pyzyme.analysis.type_analysis import KnownCall, analyze_types
from pyzyme.analysis.typetree import FLOAT64, INTEGER, MAX_DEPTH, POINTER, TypeTree
from pyzyme.errors import TypeAnalysisError

PTR_TO_DOUBLES = TypeTree({(-1,): POINTER, (-1, -1): FLOAT64})
INT64_BYTES = ", ".join(f"[-1,{i}]:Integer" for i in range(8))


def analyze(text: str, seeds=(), name: str | None = None, **kw):
    m = ir.parse_module(text)
    fn = m.get_function(name) if name else m.functions[-1]
    return analyze_types(fn, seeds, **kw)


def lines(result) -> dict[str, str]:
    """``{"%x = load double, ptr %p": "{[-1]:Float@double}", "arg %p": ..., "return": ...}``."""
    out = {}
    for line in str(result).splitlines()[1:]:
        head, _, tree = line.strip().rpartition(": ")
        out[head] = tree
    return out


# ------------------------------------------------------------------ layout
@pytest.mark.parametrize("text, size, align", [
    ("i1", 1, 1), ("i8", 1, 1), ("i16", 2, 2), ("i32", 4, 4), ("i64", 8, 8), ("i128", 16, 16),
    ("half", 2, 2), ("float", 4, 4), ("double", 8, 8), ("x86_fp80", 16, 16), ("ptr", 8, 8),
    ("<4 x double>", 32, 32), ("<3 x float>", 16, 16), ("<4 x ptr>", 32, 32), ("[5 x i32]", 20, 4),
    ("{ i8, double }", 16, 8), ("{ i32, i8 }", 8, 4), ("<{ i8, double }>", 9, 1),
    ("{ ptr, ptr, i64, i64, ptr, [2 x i64], [2 x i64] }", 72, 8),
])
def test_sizeof_alignof(text, size, align):
    ty = ir.parse_type(text)
    assert (sizeof(ty), alignof(ty)) == (size, align)


def test_field_offset():
    ty = ir.parse_type("{ i8, { i32, [3 x double] } }")
    off, member = field_offset(ty, [1, 1, 2])
    assert (off, str(member)) == (32, "double")
    assert field_offset(ty, [1])[0] == 8


# ------------------------------------------------------------------ hand-written IR
def test_struct_in_memory_int_and_double_by_byte_offsets():
    res = analyze('''define double @f(ptr %s) {
entry:
  %pn = getelementptr inbounds i8, ptr %s, i64 0
  %n = load i64, ptr %pn
  %px = getelementptr inbounds i8, ptr %s, i64 8
  %x = load double, ptr %px
  %c = sitofp i64 %n to double
  %r = fmul double %x, %c
  ret double %r
}''')
    got = lines(res)
    assert got["arg %s"] == f"{{[-1]:Pointer, {INT64_BYTES}, [-1,8]:Float@double}}"
    assert got["%n = load i64, ptr %pn"] == "{[-1]:Integer}"
    assert got["%px = getelementptr inbounds i8, ptr %s, i64 8"] == (
        "{[-1]:Pointer, [-1,0]:Float@double}")
    assert got["%c = sitofp i64 %n to double"] == "{[-1]:Float@double}"
    assert got["return"] == "{[-1]:Float@double}"


def test_typed_struct_gep_and_gep_chain_to_a_nested_pointer():
    res = analyze('''define void @f(ptr %s, i64 %n, double %x) {
entry:
  %p = getelementptr inbounds { i64, double }, ptr %s, i64 0, i32 1
  store double %x, ptr %p
  store i64 %n, ptr %s
  %q = getelementptr i8, ptr %s, i64 16
  %v = load ptr, ptr %q
  %w = getelementptr double, ptr %v, i64 %n
  store double %x, ptr %w
  ret void
}''')
    got = lines(res)
    assert got["arg %s"] == (f"{{[-1]:Pointer, {INT64_BYTES}, [-1,8]:Float@double, "
                             "[-1,16]:Pointer, [-1,16,-1]:Float@double}")
    assert got["%v = load ptr, ptr %q"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert got["%w = getelementptr double, ptr %v, i64 %n"] == (
        "{[-1]:Pointer, [-1,-1]:Float@double}")
    assert "store" not in str(res)  # only values with results are listed


def test_memcpy_copies_the_source_tree_for_the_copied_length():
    res = analyze('''declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
define void @f(ptr %dst, ptr %src, ptr %d2, i64 %n) {
entry:
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 24, i1 false)
  call void @llvm.memcpy.p0.p0.i64(ptr %d2, ptr %src, i64 %n, i1 false)
  ret void
}''', {1: PTR_TO_DOUBLES})
    got = lines(res)
    assert got["arg %dst"] == (
        "{[-1]:Pointer, [-1,0]:Float@double, [-1,8]:Float@double, [-1,16]:Float@double}")
    assert got["arg %d2"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert got["arg %n"] == "{[-1]:Integer}"


def test_allocators_are_the_rule_rows():
    """Which calls allocate is read from the rule table's Allocation and Mirror rows: every
    size operand (calloc's count too), a reallocation's size, and an allocator the table it is
    handed registers; a list's MemInfo (resizable) is learnt from its uses alone."""
    from pyzyme.rules import default_rules
    from pyzyme.rules.spec import Allocation
    from pyzyme.rules.table import RuleTable
    text = '''declare ptr @NRT_MemInfo_new_varsize(i64)
declare ptr @calloc(i64, i64)
declare ptr @realloc(ptr, i64)
declare ptr @my_alloc(i64, i64)
define void @f(i64 %n, i64 %k, i64 %s, ptr %old, i64 %a, i64 %b) {
entry:
  %mi = call ptr @NRT_MemInfo_new_varsize(i64 %n)
  %c = call ptr @calloc(i64 %k, i64 8)
  %r = call ptr @realloc(ptr %old, i64 %s)
  %m = call ptr @my_alloc(i64 %a, i64 %b)
  ret void
}'''
    got = lines(analyze(text))
    assert got["%mi = call ptr @NRT_MemInfo_new_varsize(i64 %n)"] == "{[-1]:Pointer}"
    assert got["arg %k"] == got["arg %s"] == "{[-1]:Integer}"
    assert got["arg %b"] == "{}"  # my_alloc is no allocator of the default table
    table = RuleTable(default_rules().rows())
    table.add(Allocation(("my_alloc",), "libm", size_args=(1,)))
    got = lines(analyze(text, rules=table))
    assert got["arg %b"] == "{[-1]:Integer}" and got["arg %a"] == "{}"


def test_memcpy_backwards_from_destination():
    res = analyze('''declare void @llvm.memmove.p0.p0.i64(ptr, ptr, i64, i1)
define void @f(ptr %dst, ptr %src) {
entry:
  call void @llvm.memmove.p0.p0.i64(ptr %dst, ptr %src, i64 16, i1 false)
  ret void
}''', {0: PTR_TO_DOUBLES})
    assert lines(res)["arg %src"] == "{[-1]:Pointer, [-1,0]:Float@double, [-1,8]:Float@double}"


def test_phi_and_select_of_pointers():
    res = analyze('''define double @f(i1 %c, ptr %a, ptr %b) {
entry:
  br i1 %c, label %l, label %r
l:
  br label %j
r:
  br label %j
j:
  %p = phi ptr [ %a, %l ], [ %b, %r ]
  %x = load double, ptr %p
  %q = select i1 %c, ptr %a, ptr %b
  ret double %x
}''')
    got = lines(res)
    assert got["%p = phi ptr [ %a, %l ], [ %b, %r ]"] == "{[-1]:Pointer, [-1,0]:Float@double}"
    # what a pointer points to does not flow back from a merge (they may differ)
    assert got["arg %a"] == got["arg %b"] == "{[-1]:Pointer}"
    res = analyze('''define double @f(i1 %c, ptr %a, ptr %b, i64 %i, i64 %j) {
entry:
  %x = load double, ptr %a
  %k = select i1 %c, i64 %i, i64 %j
  %s = sitofp i64 %k to double
  %q = select i1 %c, ptr %a, ptr %b
  %y = load double, ptr %q
  ret double %y
}''')
    got = lines(res)
    assert got["%q = select i1 %c, ptr %a, ptr %b"] == "{[-1]:Pointer, [-1,0]:Float@double}"
    assert got["arg %i"] == got["arg %j"] == "{[-1]:Integer}"  # the value's own type does


# A hash table's bucket array (libc++'s unordered_map) holds pointers both to nodes and to the
# "before-begin" node embedded in the table: two kinds of memory, a float at byte 16 of one
# (the table's max_load_factor) and integers at byte 16 of the other (the key's bytes).
BUCKETS = '''define float @f(ptr %t, ptr %node, i64 %i, i64 %j, i64 %key) {
entry:
  %buckets = load ptr, ptr %t
  %bb = getelementptr i8, ptr %t, i64 16
  %slot.i = getelementptr ptr, ptr %buckets, i64 %i
  store ptr %bb, ptr %slot.i
  %slot.j = getelementptr ptr, ptr %buckets, i64 %j
  store ptr %node, ptr %slot.j
  %k = mul i64 %key, 3
  %tagp = getelementptr i8, ptr %node, i64 16
  store i64 %k, ptr %tagp
  %mlfp = getelementptr i8, ptr %t, i64 32
  %mlf = load float, ptr %mlfp
  %pn = load ptr, ptr %slot.i
  %next = load ptr, ptr %pn
  %hashp = getelementptr i8, ptr %pn, i64 8
  %hash = load i64, ptr %hashp
  %h = mul i64 %hash, 2
  READ
  ret float %mlf
}'''


def test_pointers_to_different_memory_in_one_slot_keep_what_they_share():
    got = lines(analyze(BUCKETS.replace("READ", "")))
    # each pointer keeps what its own memory holds ...
    assert "[-1,16]:Integer" in got["arg %node"] and "[-1,16]:Float" not in got["arg %node"]
    assert "[-1,32]:Float@float" in got["arg %t"] and "[-1,32]:Integer" not in got["arg %t"]
    # ... and one read back from the slot knows only what both agree on (what its readers
    # find: a pointer at 0, an integer at 8), nothing at byte 16
    pn = got["%pn = load ptr, ptr %slot.i"]
    assert "[-1,0]:Pointer" in pn and "[-1,8]:Integer" in pn and "[-1,16]" not in pn


def test_pointers_to_different_memory_in_one_slot_read_as_one_kind_is_an_error():
    # a reader of the slot using byte 16 as a float: false of the node stored there
    read = "%fp = getelementptr i8, ptr %pn, i64 16\n  %fv = load float, ptr %fp"
    with pytest.raises(TypeAnalysisError, match="conflicting types"):
        analyze(BUCKETS.replace("READ", read))


def test_loop_over_an_array_by_index():
    res = analyze('''define double @f(ptr %a, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %s = phi double [ 0.0, %entry ], [ %s.next, %loop ]
  %p = getelementptr inbounds double, ptr %a, i64 %i
  %x = load double, ptr %p
  %s.next = fadd double %s, %x
  %i.next = add nuw i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret double %s.next
}''')
    got = lines(res)
    # a double at every element of a variable index: the array holds doubles everywhere
    assert got["arg %a"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert got["%i = phi i64 [ 0, %entry ], [ %i.next, %loop ]"] == "{[-1]:Integer}"
    assert got["%i.next = add nuw i64 %i, 1"] == "{[-1]:Integer}"


def test_loop_stepping_a_pointer_is_bounded():
    res = analyze('''define double @f(ptr %a, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %p = phi ptr [ %a, %entry ], [ %p.next, %loop ]
  %s = phi double [ 0.0, %entry ], [ %s.next, %loop ]
  %x = load double, ptr %p
  %s.next = fadd double %s, %x
  %p.next = getelementptr i8, ptr %p, i64 8
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret double %s.next
}''', {0: PTR_TO_DOUBLES})
    got = lines(res)
    assert got["%p.next = getelementptr i8, ptr %p, i64 8"] == (
        "{[-1]:Pointer, [-1,-1]:Float@double}")
    assert got["%x = load double, ptr %p"] == "{[-1]:Float@double}"


def test_unseeded_pointer_step_terminates():
    res = analyze('''define double @f(ptr %a) {
entry:
  br label %loop
loop:
  %p = phi ptr [ %a, %entry ], [ %p.next, %loop ]
  %x = load double, ptr %p
  %p.next = getelementptr i8, ptr %p, i64 8
  br label %loop
}''')
    got = lines(res)
    assert got["%p = phi ptr [ %a, %entry ], [ %p.next, %loop ]"] == (
        "{[-1]:Pointer, [-1,0]:Float@double}")
    assert got["arg %a"] == "{[-1]:Pointer}"


def test_linked_list_push_terminates():
    # Each node links to the previous head, loaded from where the new node is then stored:
    # a node's tree holds a node's tree at offset 0, one level deeper on every pass over the
    # loop (the analysis never ended). Paths stop at MAX_DEPTH offsets.
    text = '''declare ptr @malloc(i64)
define void @push(ptr %head, double %x, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %node = call ptr @malloc(i64 16)
  %old = load ptr, ptr %head
  store ptr %old, ptr %node
  %value = getelementptr i8, ptr %node, i64 8
  store double %x, ptr %value
  store ptr %node, ptr %head
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}'''
    found = []
    worker = threading.Thread(target=lambda: found.append(analyze(text)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert found, "type analysis of a linked list's push did not finish"
    got = lines(found[0])
    head = got["arg %head"]
    assert "[-1,0,8]:Float@double" in head and "[-1,0,0,8]:Float@double" in head
    assert max(len(key.split(",")) for key in re.findall(r"\[([-\d,]+)\]", head)) == MAX_DEPTH


def test_ptrtoint_add_inttoptr_keeps_the_pointer():
    res = analyze('''define double @f(ptr %a) {
entry:
  %i = ptrtoint ptr %a to i64
  %j = add i64 %i, 16
  %m = and i64 %i, 31
  %d = sub i64 %j, %i
  %q = inttoptr i64 %j to ptr
  %x = load double, ptr %q
  ret double %x
}''', {0: PTR_TO_DOUBLES})
    got = lines(res)
    assert got["%i = ptrtoint ptr %a to i64"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert got["%j = add i64 %i, 16"] == "{[-1]:Pointer, [-1,0]:Float@double}"  # from %q
    assert got["%m = and i64 %i, 31"] == "{[-1]:Integer}"
    assert got["%d = sub i64 %j, %i"] == "{[-1]:Integer}"
    assert got["%x = load double, ptr %q"] == "{[-1]:Float@double}"


def test_float_bits_through_integer_ops():
    res = analyze('''define double @f(double %x) {
entry:
  %b = bitcast double %x to i64
  %m = and i64 %b, 9223372036854775807
  %y = bitcast i64 %m to double
  ret double %y
}''')
    got = lines(res)
    assert got["%b = bitcast double %x to i64"] == "{[-1]:Float@double}"
    assert got["%m = and i64 %b, 9223372036854775807"] == "{[-1]:Float@double}"


def test_aggregates_extractvalue_insertvalue():
    res = analyze('''define { i64, double } @f({ i64, double } %a, double %x) {
entry:
  %n = extractvalue { i64, double } %a, 0
  %b = insertvalue { i64, double } undef, double %x, 1
  %c = insertvalue { i64, double } %b, i64 %n, 0
  ret { i64, double } %c
}''')
    got = lines(res)
    assert got["%b = insertvalue { i64, double } undef, double %x, 1"] == "{[8]:Float@double}"
    assert got["arg %a"] == "{[8]:Float@double}"
    assert got["%n = extractvalue { i64, double } %a, 0"] == "{}"
    res = analyze('''define double @f({ i64, double } %a) {
entry:
  %n = extractvalue { i64, double } %a, 0
  %m = mul i64 %n, 3
  %x = extractvalue { i64, double } %a, 1
  ret double %x
}''')
    got = lines(res)
    assert got["%m = mul i64 %n, 3"] == "{[-1]:Integer}"
    assert got["%n = extractvalue { i64, double } %a, 0"] == "{[-1]:Integer}"  # multiplied
    ints = ", ".join(f"[{i}]:Integer" for i in range(8))
    assert got["arg %a"] == f"{{{ints}, [8]:Float@double}}"


def test_vectors():
    res = analyze('''declare <4 x double> @llvm.exp.v4f64(<4 x double>)
define double @f(ptr %p) {
entry:
  %v = load <4 x double>, ptr %p
  %e = call <4 x double> @llvm.exp.v4f64(<4 x double> %v)
  %x = extractelement <4 x double> %e, i64 2
  ret double %x
}''')
    got = lines(res)
    assert got["arg %p"] == ("{[-1]:Pointer, [-1,0]:Float@double, [-1,8]:Float@double, "
                             "[-1,16]:Float@double, [-1,24]:Float@double}")
    assert got["%x = extractelement <4 x double> %e, i64 2"] == "{[-1]:Float@double}"


def test_allocation_calls():
    res = analyze('''declare ptr @NRT_MemInfo_alloc_aligned(i64, i32)
declare ptr @malloc(i64)
define void @f(i64 %n, double %x) {
entry:
  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)
  %pd = getelementptr i8, ptr %mi, i64 24
  %d = load ptr, ptr %pd
  %q = getelementptr double, ptr %d, i64 %n
  store double %x, ptr %q
  %m = call ptr @malloc(i64 %n)
  ret void
}''')
    got = lines(res)
    assert got["%d = load ptr, ptr %pd"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert "[-1,24]:Pointer, [-1,24,-1]:Float@double, [-1,32]:Integer" in got[
        "%mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)"]
    assert got["%m = call ptr @malloc(i64 %n)"] == "{[-1]:Pointer}"
    assert got["arg %n"] == "{[-1]:Integer}"


def test_known_calls_and_libm_out_pointers():
    res = analyze('''declare double @modf(double, ptr)
declare i64 @mystery(ptr)
define void @f(double %x, ptr %ip, ptr %m) {
entry:
  %f = call double @modf(double %x, ptr %ip)
  %k = call i64 @mystery(ptr %m)
  ret void
}''', known_calls={"mystery": KnownCall(TypeTree({(-1,): INTEGER}), (PTR_TO_DOUBLES,))})
    got = lines(res)
    assert got["arg %ip"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert got["arg %m"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert got["%k = call i64 @mystery(ptr %m)"] == "{[-1]:Integer}"


def test_interprocedural_callee_learns_and_teaches():
    text = '''define internal double @get(ptr %p, i64 %i) {
entry:
  %q = getelementptr double, ptr %p, i64 %i
  %x = load double, ptr %q
  ret double %x
}
define double @f(ptr %a, ptr %b) {
entry:
  %x = call double @get(ptr %a, i64 3)
  %y = call double @get(ptr %b, i64 1)
  %s = fadd double %x, %y
  ret double %s
}'''
    res = analyze(text, name="f")
    got = lines(res)
    assert got["arg %a"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert got["arg %b"] == "{[-1]:Pointer, [-1,-1]:Float@double}"


def test_recursion_terminates():
    res = analyze('''define double @f(ptr %p, i64 %n) {
entry:
  %c = icmp eq i64 %n, 0
  br i1 %c, label %base, label %rec
base:
  %x = load double, ptr %p
  ret double %x
rec:
  %m = sub i64 %n, 1
  %y = call double @f(ptr %p, i64 %m)
  ret double %y
}''')
    assert lines(res)["arg %p"] == "{[-1]:Pointer, [-1,0]:Float@double}"


def test_unnamed_values_print_with_slot_numbers():
    res = analyze('''define double @f(ptr %0) {
  %2 = load double, ptr %0
  ret double %2
}''')
    assert str(res) == ("type analysis of @f\n"
                        "  arg %0: {[-1]:Pointer, [-1,0]:Float@double}\n"
                        "  %2 = load double, ptr %0: {[-1]:Float@double}\n"
                        "  return: {[-1]:Float@double}")


def test_return_tree_seed_flows_backwards():
    res = analyze('''define i64 @f(ptr %p) {
entry:
  %x = load i64, ptr %p
  ret i64 %x
}''', return_tree=TypeTree({(-1,): INTEGER}))
    assert lines(res)["arg %p"] == f"{{[-1]:Pointer, {INT64_BYTES}}}"


# ------------------------------------------------------------------ errors
def test_conflict_names_value_function_and_instruction():
    text = '''define void @f(ptr %p, i64 %n) {
entry:
  store i64 %n, ptr %p
  %x = load double, ptr %p
  ret void
}'''
    with pytest.raises(TypeAnalysisError) as info:
        analyze(text, {1: TypeTree({(-1,): INTEGER})})
    msg = str(info.value)
    assert "conflicting types for" in msg and "in @f" in msg
    assert "while analysing:" in msg and "hint:" in msg


def test_seeded_conflict_integer_vs_float():
    with pytest.raises(TypeAnalysisError, match="Integer and Float@double|Float@double and Int"):
        analyze('''define double @f(ptr %p) {
entry:
  %x = load double, ptr %p
  ret double %x
}''', {0: TypeTree({(-1,): POINTER, (-1, -1): INTEGER})})


def test_require_known():
    res = analyze('''define i64 @f(ptr %p, ptr %q) {
entry:
  %x = load i64, ptr %p
  %y = load double, ptr %q
  ret i64 %x
}''')
    fn = res.function
    x, y = [i for i in fn.instructions() if i.opcode == "load"]
    assert str(res.require_known(y, "the adjoint of a load")) == "Float@double"
    assert str(res.require_known(fn.args[1], "a shadow")) == "Pointer"
    with pytest.raises(TypeAnalysisError) as info:
        res.require_known(x, "the adjoint of a load")
    msg = str(info.value)
    assert "cannot tell what %x (i64) holds, needed for the adjoint of a load, in @f" in msg
    assert "at: %x = load i64, ptr %p" in msg
    with pytest.raises(TypeAnalysisError, match="at byte 0"):
        res.require_known(x, "a load", offset=0)


# ------------------------------------------------------------------ Numba
def _numba_results(f, args):
    from pyzyme.frontends.numba import capture

    cap = capture(f, args)
    fn = ir.parse_module(cap.text).get_function(cap.symbol)
    return cap, analyze_types(fn, seed_from_abi(cap.abi))


def _only(got: dict[str, str], *needles: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in got.items() if all(n in k for n in needles)]


def test_seed_from_abi_scalars_tuples_records():
    from numba.core import types
    from numba.core.registry import cpu_target

    from pyzyme.frontends.numba.abi import AbiMap

    rec = types.Record.make_c_struct([("n", types.int64), ("x", types.float64)])
    sig = types.float64(types.float32, types.UniTuple(types.float64, 2), types.boolean,
                        rec, types.complex128, types.int32[:, ::1])
    abi = AbiMap.from_signature(cpu_target.target_context, "f", ("a", "t", "b", "r", "z", "m"),
                                sig)
    seeds = seed_from_abi(abi)
    by_field = {p.field: str(seeds.get(p.index)) for p in abi.native_params}
    assert by_field["a"] == "{[-1]:Float@float}"
    assert by_field["t[0]"] == by_field["t[1]"] == "{[-1]:Float@double}"
    assert by_field["b"] == "{[-1]:Integer}"
    assert by_field["r"] == f"{{[-1]:Pointer, {INT64_BYTES}, [-1,8]:Float@double}}"
    assert by_field["z.real"] == by_field["z.imag"] == "{[-1]:Float@double}"
    assert by_field["m.data"] == "{[-1]:Pointer, [-1,-1]:Integer}"
    assert by_field["m.shape[1]"] == by_field["m.strides[0]"] == "{[-1]:Integer}"
    assert by_field["m.parent"] == "{[-1]:Pointer}"
    assert str(seeds[0]) == "{[-1]:Pointer, [-1,0]:Float@double}"
    assert str(seeds[1]) == "{[-1]:Pointer}"


def test_numba_array_sum():
    from numba import njit

    @njit
    def asum(a):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i]
        return s

    cap, res = _numba_results(asum, (np.ones(3),))
    got = lines(res)
    assert got["arg %arg.a.4"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    loads = _only(got, "= load double")
    assert loads and all(v == "{[-1]:Float@double}" for _, v in loads)
    geps = _only(got, "getelementptr", "%arg.a.4")
    assert geps and all(v == "{[-1]:Pointer, [-1,-1]:Float@double}" for _, v in geps)
    assert all(v == "{[-1]:Integer}" for _, v in _only(got, "= icmp"))


def test_numba_empty_and_fill():
    from numba import njit

    @njit
    def fill(n, x):
        out = np.empty(n)
        for i in range(n):
            out[i] = x * i
        return out

    cap, res = _numba_results(fill, (3, 2.0))
    got = lines(res)
    data = _only(got, "= load ptr")
    assert data and all(v == "{[-1]:Pointer, [-1,-1]:Float@double}" for _, v in data)
    stores = _only(got, "getelementptr double")
    assert stores and all(v == "{[-1]:Pointer, [-1,-1]:Float@double}" for _, v in stores)
    (alloc,) = _only(got, "@NRT_MemInfo_alloc_aligned")
    assert "[-1,24]:Pointer, [-1,24,-1]:Float@double" in alloc[1]
    assert got["arg %arg.x"] == "{[-1]:Float@double}"
    assert got["arg %arg.n"] == "{[-1]:Integer}"


def test_numba_2d_array():
    from numba import njit

    @njit
    def m2(a):
        s = 0.0
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                s += a[i, j] * a[j, i]
        return s

    cap, res = _numba_results(m2, (np.ones((3, 3)),))
    got = lines(res)
    assert got["arg %arg.a.5.1"] == "{[-1]:Integer}"
    muls = _only(got, "= mul ")
    assert muls and all(v == "{[-1]:Integer}" for _, v in muls)
    loads = _only(got, "= load double")
    assert len(loads) >= 2 and all(v == "{[-1]:Float@double}" for _, v in loads)
    for _, v in _only(got, "getelementptr"):
        assert v == "{[-1]:Pointer, [-1,-1]:Float@double}"


def test_phi_of_pointers_to_different_types_keeps_what_they_share():
    # Numba sinks the NRT_decref of a float array and of an int array into one call.
    res = analyze('''declare void @NRT_decref(ptr)
define void @f(i1 %c, ptr %a, ptr %b) {
entry:
  %x = load double, ptr %a
  %n = load i64, ptr %b
  %k = sitofp i64 %n to double
  br i1 %c, label %l, label %r
l:
  br label %j
r:
  br label %j
j:
  %m = phi ptr [ %a, %l ], [ %b, %r ]
  call void @NRT_decref(ptr %m)
  ret void
}''')
    got = lines(res)
    assert got["%m = phi ptr [ %a, %l ], [ %b, %r ]"] == "{[-1]:Pointer}"
    assert got["arg %a"] == "{[-1]:Pointer, [-1,0]:Float@double}"
    assert got["arg %b"] == f"{{[-1]:Pointer, {INT64_BYTES}}}"
    phi = next(i for i in res.function.instructions() if i.opcode == "phi")
    assert str(res.tree(phi).data0().lookup(0)) == "Unknown"


def test_numba_shared_decref_of_float_and_int_arrays():
    # np.sort + np.searchsorted: LLVM sinks the NRT_decref of arrays of different dtypes
    # into one call through a phi, which must not make their elements conflict.
    from tests.corpus.numba_functions import np_sort_where

    cap, res = _numba_results(np_sort_where, (np.linspace(0.0, 1.0, 7),))
    got = lines(res)
    assert got["arg %arg.x.4"] == "{[-1]:Pointer, [-1,-1]:Float@double}"
    loads = _only(got, "= load double")
    assert loads and all(v == "{[-1]:Float@double}" for _, v in loads)


def test_enzyme_type_hint_calls():
    res = analyze('''declare void @__enzyme_double(ptr, i64)
declare void @__enzyme_integer(ptr, i64)
define void @f(ptr %a, ptr %b, i64 %n) {
entry:
  call void @__enzyme_double(ptr %a, i64 16)
  call void @__enzyme_integer(ptr %b, i64 %n)
  ret void
}''')
    got = lines(res)
    assert got["arg %a"] == "{[-1]:Pointer, [-1,0]:Float@double, [-1,8]:Float@double}"
    assert got["arg %b"] == "{[-1]:Pointer, [-1,-1]:Integer}"
    assert got["arg %n"] == "{[-1]:Integer}"


# -- a memo shared between runs: a function met again starts from its earlier fixed point ----

_CALLER_AND_CALLEE = """
define double @g(ptr %p, ptr %q, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %j, %loop ]
  %s = phi double [ 0.0, %entry ], [ %t, %loop ]
  %a = getelementptr double, ptr %p, i64 %i
  %x = load double, ptr %a
  %b = getelementptr i8, ptr %q, i64 8
  %c = load ptr, ptr %b
  %y = load i64, ptr %c
  %t = fadd double %s, %x
  %j = add i64 %i, 1
  %done = icmp eq i64 %j, %n
  br i1 %done, label %out, label %loop
out:
  ret double %t
}

define double @f(ptr %p, ptr %q, i64 %n) {
entry:
  %r = call double @g(ptr %p, ptr %q, i64 %n)
  ret double %r
}
"""


def _counting_visits(monkeypatch):
    from pyzyme.analysis import type_analysis

    visits: dict = {}
    plain = type_analysis._Analyzer.visit

    def visit(self, inst):
        visits[self.fn.name] = visits.get(self.fn.name, 0) + 1
        plain(self, inst)

    monkeypatch.setattr(type_analysis._Analyzer, "visit", visit)
    return visits


def test_a_run_with_trees_that_say_more_starts_from_the_earlier_fixed_point(monkeypatch):
    m = ir.parse_module(_CALLER_AND_CALLEE)
    g, f = m.get_function("g"), m.get_function("f")
    ints = TypeTree({(-1,): POINTER, (-1, 8): POINTER, (-1, 8, -1): INTEGER})
    cold = analyze_types(g, {0: PTR_TO_DOUBLES, 1: ints})   # what a caller knowing both says
    visits = _counting_visits(monkeypatch)
    memo: dict = {}
    plain = analyze_types(g, {}, memo=memo)
    first = visits.pop("g")
    # f passes g what f is told: more than nothing, so g's run starts from the one above
    warm = analyze_types(f, {0: PTR_TO_DOUBLES, 1: ints}, memo=memo)
    assert str(warm).count("Float@double") > 0
    assert 0 < visits["g"] < first / 2
    # and it ends where a run from nothing ends: g's trees for these seeds
    monkeypatch.undo()
    memo_g = [v for k, v in memo.items() if isinstance(k, tuple) and k[0] is g]
    (seeded,) = memo_g
    assert lines(seeded) == lines(cold)
    assert lines(plain) != lines(cold)  # the start said less


def test_a_run_with_trees_that_say_less_starts_from_nothing(monkeypatch):
    m = ir.parse_module(_CALLER_AND_CALLEE)
    g = m.get_function("g")
    ints = TypeTree({(-1,): POINTER, (-1, 8): POINTER, (-1, 8, -1): INTEGER})
    less = TypeTree({(-1,): POINTER, (-1, 8): POINTER})
    memo: dict = {}
    analyze_types(g, {1: ints}, memo=memo)
    visits = _counting_visits(monkeypatch)
    other = analyze_types(g, {1: less}, memo=memo)
    from_memo = visits.pop("g")
    fresh = analyze_types(g, {1: less})
    assert from_memo == visits["g"] > 0     # as many visits as a run from nothing
    assert lines(other) == lines(fresh)
    assert "Integer" not in lines(other)["%c = load ptr, ptr %b"]


def test_a_run_that_skipped_a_recursive_call_is_not_a_start():
    m = ir.parse_module("""
define double @r(ptr %p, i64 %n) {
entry:
  %z = icmp eq i64 %n, 0
  br i1 %z, label %base, label %rec
base:
  %x = load double, ptr %p
  ret double %x
rec:
  %m = sub i64 %n, 1
  %y = call double @r(ptr %p, i64 %m)
  ret double %y
}
""")
    r = m.get_function("r")
    memo: dict = {}
    analyze_types(r, {}, memo=memo)
    # r's run analysed its call of r, whose run met that call again while under way and
    # skipped it (the outer run comes back to it): neither is a fixed point to start from
    (inner_key,) = memo[type_runs.PARTIAL]
    assert inner_key[0] is r
    assert (type_runs.FINISHED, r) not in memo
