"""Memory that only holds an exception being raised (pyzyme.analysis.exception_records): what
counts, and what does not (memory read back as numbers, or stored where others read it)."""

import pytest

from pyzyme.analysis.exception_records import raised_only
from pyzyme.ir import parse_module

_HEAD = """
declare ptr @NRT_Allocate(i64)
declare void @NRT_Free(ptr)
declare ptr @opaque(ptr)
declare void @pyzyme.defer_release(ptr, ptr, ptr, ptr)
@constant_record = external global { ptr, i32, ptr, ptr, i32 }
"""


def _allocations(body: str, params: str = "ptr %retptr, ptr %excinfo, ptr %x, i1 %c"):
    m = parse_module(_HEAD + f"define i32 @f({params}) {{\n{body}\n}}")
    fn = m.get_function("f")
    return {i.name: raised_only(i) for i in fn.instructions()
            if i.opcode == "call" and i.called_function.name == "NRT_Allocate"}


def test_a_record_merged_with_constant_records_read_back_whole_and_freed():
    # The shape of a prange body's raising path: the dynamic record and a constant one meet
    # in a phi, are read back whole, and the dynamic one is freed.
    got = _allocations("""
entry:
  %args = call ptr @NRT_Allocate(i64 48)
  %slot = getelementptr i8, ptr %args, i64 32
  store ptr %x, ptr %slot
  %record = call ptr @NRT_Allocate(i64 40)
  %null = icmp eq ptr %record, null
  br i1 %c, label %dynamic, label %raise
dynamic:
  %field = getelementptr i8, ptr %record, i64 16
  store ptr %args, ptr %field
  br label %raise
raise:
  %r = phi ptr [ %record, %dynamic ], [ @constant_record, %entry ]
  %fields = load { ptr, i32, ptr, ptr, i32 }, ptr %r
  call void @NRT_Free(ptr %r)
  ret i32 1
""")
    assert got == {"args": True, "record": True}


def test_a_release_deferred_by_a_reverse_sweep_frees_it():
    # The augmented body of a reverse-mode derivative defers the record's release to the end
    # of its reverse sweep (code forward mode differentiates again: hvp): still only a
    # record.
    got = _allocations("""
entry:
  %record = call ptr @NRT_Allocate(i64 40)
  %fields = load { ptr, i32, ptr, ptr, i32 }, ptr %record
  call void @pyzyme.defer_release(ptr %x, ptr null, ptr %record, ptr null)
  ret i32 1
""")
    assert got == {"record": True}


@pytest.mark.parametrize("use, why", [
    ("%v = load double, ptr %record", "read back as a number"),
    ("store ptr %record, ptr %x", "stored where the caller reads it"),
    ("%y = call ptr @opaque(ptr %record)", "handed to a call"),
])
def test_memory_used_otherwise_is_not_a_record(use, why):
    got = _allocations(f"""
entry:
  %record = call ptr @NRT_Allocate(i64 40)
  store ptr %x, ptr %record
  {use}
  store ptr %record, ptr %excinfo
  ret i32 1
""")
    assert got == {"record": False}, why


def test_arguments_stored_into_memory_that_is_not_a_record_are_not_one():
    got = _allocations("""
entry:
  %args = call ptr @NRT_Allocate(i64 16)
  %other = call ptr @NRT_Allocate(i64 16)
  store ptr %args, ptr %other
  %v = load double, ptr %other
  ret i32 1
""")
    assert got == {"args": False, "other": False}


def test_a_function_without_numba_status_parameters_has_no_excinfo():
    got = _allocations("""
entry:
  %record = call ptr @NRT_Allocate(i64 40)
  store ptr %record, ptr %excinfo
  ret i32 1
""", params="ptr %a, ptr %excinfo, ptr %x, i1 %c")
    assert got == {"record": False}
