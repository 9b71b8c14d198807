"""Memory whose primal contents no part of a derivative reads (pyzyme.analysis.unread_slots): a
launcher's reduction array read only into a sum stored into an unread result, and a body's
slot read only into the sum stored back; and each way such memory is read after all."""

from __future__ import annotations

import textwrap

import pytest

from pyzyme import ir
from pyzyme.analysis.unread_slots import linear_only, unread_after_launch, unread_stores
from pyzyme.ir import instructions as I

_DECLS = """
declare ptr @NRT_MemInfo_alloc_aligned(i64, i32)
declare void @NRT_decref(ptr)
declare void @launch(ptr, ptr)
declare void @opaque(ptr)
declare double @llvm.exp.f64(double)
"""


def _launcher(after: str, params: str = "ptr %ret, double %k"):
    """A function allocating a reduction array, launching ``@body`` on it through an
    argument array, then running ``after`` (the array's data at ``%d``)."""
    text = f"""
    define void @body(ptr %args, ptr %dims) {{
      ret void
    }}
    define void @f({params}) {{
    entry:
      %args = alloca [1 x ptr]
      %m = call ptr @NRT_MemInfo_alloc_aligned(i64 64, i32 32)
      %dp = getelementptr i8, ptr %m, i64 24
      %d = load ptr, ptr %dp
      call void @llvm.memset.p0.i64(ptr %d, i8 0, i64 64, i1 false)
      store ptr %d, ptr %args
      call void @launch(ptr @body, ptr %args)
    {textwrap.indent(textwrap.dedent(after), '  ')}
      call void @NRT_decref(ptr %m)
      ret void
    }}
    declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
    {_DECLS}"""
    fn = ir.parse_module(textwrap.dedent(text)).get_function("f")
    named = {i.name: i for i in fn.instructions() if i.name}
    launch = next(i for i in fn.instructions()
                  if isinstance(i, I.CallBase) and i.called_function.name == "launch")
    return fn, launch, named


def _unread(after: str, result: bool = True, active=lambda v: False, **kw) -> bool:
    fn, launch, named = _launcher(after, **kw)
    return unread_after_launch(fn, launch, named["d"], named["args"], active,
                               fn.args[0] if result else None)


_SUM = """
%a = load double, ptr %d
%p = getelementptr double, ptr %d, i64 1
%b = load double, ptr %p
%s = fadd double %a, %b
%t = fmul double %s, %k
store double %t, ptr %ret
"""


def test_a_sum_of_the_slots_stored_into_an_unread_result_is_unread():
    assert _unread(_SUM)


def test_a_result_someone_reads_makes_the_slots_read():
    assert not _unread(_SUM, result=False)
    assert not _unread(_SUM + "%back = load double, ptr %ret\n")


def test_a_product_by_an_active_value_reads_the_sum():
    """``d(s * k)/dk`` is ``s``: with ``k`` active the reverse sweep needs the sum."""
    assert not _unread(_SUM, active=lambda v: isinstance(v, ir.Argument) and v.name == "k")


@pytest.mark.parametrize("use", [
    "%a = load double, ptr %d\n%e = call double @llvm.exp.f64(double %a)\n"
    "store double %e, ptr %ret\n",                        # a nonlinear function of a slot
    "%a = load double, ptr %d\n%c = fcmp olt double %a, 0.0\n",    # a comparison
    "call void @opaque(ptr %d)\n",                         # handed to a call
    "%i = ptrtoint ptr %d to i64\n",                       # its address taken as a number
    "%q = getelementptr i8, ptr %args, i64 8\nstore ptr %d, ptr %q\n",  # in a second slot
])
def test_other_reads_make_the_slots_read(use):
    assert not _unread(use)


def test_memory_the_function_did_not_allocate_is_read_by_its_caller():
    fn, launch, named = _launcher(_SUM, params="ptr %ret, double %k, ptr %x")
    assert not unread_after_launch(fn, launch, fn.args[2], named["args"],
                                   lambda v: False, fn.args[0])


def _body(text: str):
    m = ir.parse_module(textwrap.dedent(f"""
    define void @body(ptr %args) {{
    entry:
      %slot = load ptr, ptr %args
    {textwrap.indent(textwrap.dedent(text), '  ')}
      ret void
    }}
    {_DECLS}"""))
    fn = m.get_function("body")
    return fn.blocks[0].instructions[0], {i.name: i for i in fn.instructions() if i.name}


def test_a_body_adding_into_its_slot_stores_nothing_anyone_reads():
    slot, named = _body("""
    %old = load double, ptr %slot
    %x = load double, ptr %args
    %new = fadd double %old, %x
    store double %new, ptr %slot
    """)
    assert unread_stores([slot], lambda v: True) == [named["new"].users[0]]


@pytest.mark.parametrize("text", [
    """%old = load double, ptr %slot
    %new = fmul double %old, %old
    store double %new, ptr %slot""",                      # a product reduction: reads it
    """%old = load double, ptr %slot
    call void @opaque(ptr %slot)
    store double %old, ptr %slot""",                      # handed to a call
])
def test_a_body_reading_its_slot_otherwise_keeps_its_stores(text):
    slot, _ = _body(text)
    assert unread_stores([slot], lambda v: True) is None


def test_linear_operations_carry_no_need_for_their_operands():
    _, named = _body("""
    %a = load double, ptr %slot
    %b = fneg double %a
    %c = fmul double %b, 2.0
    %d = fdiv double %c, 3.0
    store double %d, ptr %args
    """)
    def active(v):
        return isinstance(v, I.Instruction)     # the constants are not
    assert linear_only([named["a"]], lambda s: True, active)
    assert not linear_only([named["a"]], lambda s: False, active)
