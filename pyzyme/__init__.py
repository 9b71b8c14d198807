"""pyzyme: Enzyme-style automatic differentiation of optimized LLVM IR.

The public API (see the README) is re-exported here and nothing else.
"""

from pyzyme.errors import (
    ActivityError,
    ArgumentTypeError,
    ArgumentValueError,
    CaptureError,
    FrontendError,
    IRTypeError,
    ParseError,
    PyzymeError,
    RecursionDepthError,
    TapeBudgetError,
    UnsupportedError,
    VerifyError,
)

from pyzyme._version import __version__, check_dependencies  # noqa: E402

check_dependencies()  # another numba or llvmlite: an ImportError naming the supported versions

import pyzyme.frontends.numba.hook  # noqa: E402,F401  installs the capture hook before Numba compiles anything

from pyzyme.api.annotations import (  # noqa: E402
    Active,
    BatchDuplicated,
    BatchDuplicatedNoNeed,
    Const,
    Duplicated,
    DuplicatedNoNeed,
)
from pyzyme.api.autodiff import autodiff  # noqa: E402
from pyzyme.api.convenience import gradient, jacobian  # noqa: E402
from pyzyme.api.args.make_zero import make_zero  # noqa: E402
from pyzyme.api.functional import grad, jacfwd, jacrev, jvp, value_and_grad, vjp  # noqa: E402
from pyzyme.api.modes import (  # noqa: E402
    Forward,
    ForwardWithPrimal,
    Reverse,
    ReverseHolomorphic,
    ReverseSplitNoPrimal,
    ReverseSplitWithPrimal,
    ReverseWithPrimal,
)
from pyzyme.api.thunks import autodiff_thunk  # noqa: E402
from pyzyme.api.reflection import code_llvm  # noqa: E402
from pyzyme.api.second_order import hessian, hvp, hvp_and_gradient  # noqa: E402
from pyzyme.api.stop_gradient import stop_gradient  # noqa: E402
from pyzyme.settings import options, set_options, set_runtime_activity  # noqa: E402
from pyzyme.progress import set_verbose  # noqa: E402
from pyzyme.rules.custom import checkpoint  # noqa: E402

__all__ = [
    "ActivityError", "ArgumentTypeError", "ArgumentValueError", "CaptureError", "FrontendError",
    "IRTypeError", "ParseError", "PyzymeError", "RecursionDepthError", "TapeBudgetError",
    "UnsupportedError", "VerifyError",
    "Active", "BatchDuplicated", "BatchDuplicatedNoNeed", "Const", "Duplicated",
    "DuplicatedNoNeed",
    "Forward", "ForwardWithPrimal", "Reverse", "ReverseHolomorphic", "ReverseSplitNoPrimal",
    "ReverseSplitWithPrimal", "ReverseWithPrimal",
    "autodiff", "autodiff_thunk", "gradient", "jacobian", "hvp", "hvp_and_gradient", "make_zero",
    "grad", "value_and_grad", "jvp", "vjp", "jacfwd", "jacrev", "hessian",
    "code_llvm", "options", "set_options", "set_runtime_activity", "set_verbose", "checkpoint",
    "stop_gradient",
]
