"""All instruction classes, one syntactic family per class (see :mod:`pyzyme.ir.instruction`
for what they share). The families live in :mod:`~pyzyme.ir.inst_values`,
:mod:`~pyzyme.ir.inst_memory` and :mod:`~pyzyme.ir.inst_control`; this module gathers them.
"""

from pyzyme.ir.inst_control import (  # noqa: F401
    Branch, Call, CallBase, CallBr, CatchRet, CatchSwitch, CleanupRet, FuncletPad, IndirectBr,
    Invoke, LandingPad, Resume, Ret, Switch, Terminator, Unreachable,
)
from pyzyme.ir.inst_memory import (  # noqa: F401
    Alloca, AtomicRMW, CmpXchg, Fence, GetElementPtr, Load, Store, VAArg,
)
from pyzyme.ir.inst_values import (  # noqa: F401
    BinaryOp, Cast, Compare, ExtractElement, ExtractValue, Freeze, InsertElement, InsertValue,
    Phi, Select, ShuffleVector, UnaryOp, aggregate_member,
)
from pyzyme.ir.instruction import (  # noqa: F401
    CASTS, FAST_MATH_FLAGS, FCMP_PREDICATES, FLOAT_BINOPS, ICMP_PREDICATES, INT_BINOPS,
    ORDERINGS, RMW_OPS, Instruction, Ref,
)
