"""Capture an ``@njit`` function as an LLVM module ready for differentiation.

``capture(f, args)`` compiles ``f`` for one signature and returns its *native* function (Numba's
internal calling convention, see :mod:`~pyzyme.frontends.numba.abi`) together with every callee
and global it needs, and nothing else: the CPython and C-callable wrappers Numba adds are removed.

The IR comes from the snapshots of :mod:`~pyzyme.frontends.numba.hook`: the module of ``f``'s
library and of every library it links (its callees, Numba's runtime), each as it was after
Numba's per-function passes and before any module optimization. They are linked into one module,
everything but the native function is made internal, and the result is optimized by
:func:`pyzyme.runtime.passes.ad_friendly` (O2 without unrolling or vectorization).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import llvmlite.binding as llvm
import numba
from numba.core import codegen as numba_codegen
from numba.core import sigutils, types
from numba.core.compiler import CompileResult
from numba.core.dispatcher import Dispatcher
from numba.core.errors import NumbaError
from numba.core.runtime import nrtdynmod, rtsys
from numba.core.typing import Signature

from pyzyme.diff.tape.pool import CAPACITY_NAME, FREE_NAME, REALLOC_NAME
from pyzyme.diff.tape.pooled_shadows import ALLOC_NAME as SHADOW_ALLOC_NAME
from pyzyme.errors import CaptureError, error_context
from pyzyme.naming import linked_original
from pyzyme.frontends.numba import bridge, foreign_calls, hook, recapture
from pyzyme.frontends.numba.abi import AbiMap
from pyzyme.frontends.numba.helper_bodies import link_helper_bodies
from pyzyme.progress import stage
from pyzyme.runtime import modules, passes

PIPELINES = ("ad", "numba")
POOL_FUNCTIONS = frozenset((REALLOC_NAME, FREE_NAME, CAPACITY_NAME, SHADOW_ALLOC_NAME))

# Numba's environment pointers: ``common global ptr null`` definitions filled in by name when the
# library is loaded (JITCPUCodegen.set_env). The captured module must refer to the filled one.
_ENV_GLOBAL = re.compile(
    r'^(@"?_ZN08NumbaEnv[^ ]*) = (?:[a-z_]+ )*global ptr null(?:, align \d+)?$', re.MULTILINE
)


def _is_env_global(name: str) -> bool:
    return name.startswith("_ZN08NumbaEnv")


@dataclass(frozen=True, eq=False)
class Captured:
    """One compiled signature of a Numba function, as an LLVM module.

    Attributes
    ----------
    text
        The module as LLVM IR text: the native function ``symbol``, its callees and globals.
    symbol
        Name of the native function in the module (Numba's mangled name; it changes between
        processes).
    signature
        The Numba signature the function was compiled for.
    abi
        Where each Python argument goes among the native parameters, and how the result returns.
    dispatcher
        The Numba dispatcher that compiled it (a private copy if ``f``, or code it links, had
        been compiled before pyzyme was imported or loaded from Numba's cache).
    compile_result
        Numba's result for ``signature`` (library, function descriptor, environment).
    pipeline
        ``"ad"`` (pre-AD O2) or ``"numba"`` (Numba's own O3, before code generation).
    stale_libraries
        Names of linked libraries whose clean IR was not available even after compiling ``f``
        again (see :mod:`~pyzyme.frontends.numba.recapture`); their code is taken as Numba
        linked it.
    """

    text: str
    symbol: str
    signature: Signature
    abi: AbiMap
    dispatcher: Dispatcher
    compile_result: CompileResult
    pipeline: str
    stale_libraries: tuple[str, ...] = field(default=())

    @cached_property
    def module(self):
        """The module as a :class:`pyzyme.ir.Module` (parsed on first use)."""
        from pyzyme import ir

        return ir.parse_module(self.text)

    def llvm_module(self) -> llvm.ModuleRef:
        """A fresh llvmlite module parsed from :attr:`text`."""
        return modules.parse(self.text, what=f"captured module of {self.abi.function}")

    def __repr__(self) -> str:
        where = f"@{self.symbol}, {self.pipeline} pipeline"
        return f"<Captured {self.abi.function}{self.signature} as {where}>"


def capture(f: Callable | Dispatcher, args: Any, *, pipeline: str = "ad",
            keep_calls: Callable[[str], bool] | None = None) -> Captured:
    """Compile ``f`` for one signature and capture its native function as an LLVM module.

    Parameters
    ----------
    f
        A Numba dispatcher (``@njit`` function) or a plain Python function, which is compiled
        with ``numba.njit``.
    args
        The signature, as a tuple of Numba types (``(float64[::1], int64)``), a Numba signature
        or signature string (``"float64(float64[::1], int64)"``), or a tuple of example arguments
        whose types Numba infers (``(np.ones(3), 2)``).
    pipeline
        ``"ad"``: the module before any of Numba's module optimizations, optimized for AD (O2,
        no unrolling or vectorization). ``"numba"``: Numba's own optimized module (O3), before
        machine code generation.
    keep_calls
        ``(symbol) -> bool``: functions whose calls must stay calls (their derivative is a
        user's rule, or they are marked inactive). They are made ``noinline`` and kept with
        their signature; asked after ``f`` is compiled, so it sees the callees compiled with it.

    Raises
    ------
    CaptureError
        If Numba cannot compile ``f`` for ``args``, or an argument type has no native form pyzyme
        can describe, or the installed Numba is not the one pyzyme was written for.

    Examples
    --------
    >>> import numba
    >>> @numba.njit
    ... def f(x, n):
    ...     return x ** n
    >>> cap = capture(f, (2.0, 3))
    >>> cap.signature
    (float64, int64) -> float64
    >>> ("define double" in cap.text, "@_ZN7cpython" in cap.text)
    (False, False)
    >>> cap.abi.native_type
    'i32 (ptr retptr, ptr excinfo, double, i64)'
    >>> cap.module.get_function(cap.symbol).is_declaration
    False
    """
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}; got {pipeline!r}")
    hook.require_installed()
    dispatcher = _as_dispatcher(f)
    name = dispatcher.py_func.__qualname__
    with error_context("capturing Numba function", name), stage("capture"):
        argtypes, return_type = _signature_types(args, name)
        cres = _compile(dispatcher, argtypes, return_type, name)
        # Compiled (or linking code compiled) before pyzyme was imported, or loaded from Numba's
        # cache: no clean IR was kept, so a private copy compiles it again while the hook
        # watches.
        dispatcher, cres = _recompiled(dispatcher, cres, name)
        symbol = cres.fndesc.llvm_func_name
        abi = AbiMap.from_signature(
            cres.target_context, name, tuple(cres.fndesc.args), cres.signature
        )

        if pipeline == "ad":
            module, stale = _linked_prelink_module(cres.library)
            _restore_names(module, symbol)
            module = _debug_inlining_restored(module)
            link_helper_bodies(module)  # C helpers differentiated by an IR body (complex power)
            kept = _kept_calls(module, keep_calls, symbol)
            if kept:
                module = _no_inline(module, kept)
            # Kept functions stay visible so no pass rewrites their signature (dead argument
            # elimination, constant propagation into them): their calls must match the ABI.
            # So do the tape pool's functions of a derivative this code calls (grad inside
            # @njit code): forward mode over it mirrors their calls by their rows' operands,
            # which constant propagation would otherwise remove (tape_realloc(null, 64) became
            # tape_realloc()).
            pooled = _visible_pool_functions(module)
            passes.strip_to(module, [symbol, *kept, *pooled], keep_globals=_is_env_global)
            _inline_launch_wrappers(module)
            module = passes.ad_friendly(module, inline_small=True)
            # ctypes calls (numba-mpi's MPI calls) named by symbol, their handles folded
            text, renamed = foreign_calls.name_foreign_calls(str(module))
            if renamed:
                module = passes.ad_friendly(modules.parse(text, what=f"{name} with named calls"))
        else:
            module, stale = cres.library._get_module_for_linking().clone(), ()
            module.get_function(symbol).linkage = "external"
            passes.strip_to(module, [symbol], keep_globals=_is_env_global)
        text = _declare_env_globals(str(module))
        module = modules.parse(text, what=f"captured module of {name}")
        abi.check_function(module.get_function(symbol))
    return Captured(
        text=str(module),
        symbol=symbol,
        signature=cres.signature,
        abi=abi,
        dispatcher=dispatcher,
        compile_result=cres,
        pipeline=pipeline,
        stale_libraries=stale,
    )


def _restore_names(module: llvm.ModuleRef, root: str) -> None:
    """Give the callees recompiled by :mod:`~pyzyme.frontends.numba.recapture` the names of
    the functions they stand for, as a compilation after ``import pyzyme`` would have named
    them: user rules are found by name.

    The root keeps its own name: two dispatchers loaded from the same cache entry share their
    names, and their derivatives must not (one may be loaded from pyzyme's disk cache, the
    other built).
    """
    originals = recapture.original_names()
    present = {fn.name for fn in module.functions}
    for fn in module.functions:
        original = originals.get(fn.name)
        if original is not None and original not in present and fn.name != root:
            present.add(original)
            fn.name = original


def _visible_pool_functions(module: llvm.ModuleRef) -> list[str]:
    """The tape pool's functions that ``module`` defines (linked in with a derivative), made
    external so that no pass rewrites their signatures; their names."""
    names = []
    for fn in module.functions:
        if not fn.is_declaration and linked_original(fn.name) in POOL_FUNCTIONS:
            fn.linkage = "external"
            names.append(fn.name)
    return names


def _kept_calls(module: llvm.ModuleRef, keep_calls, root: str) -> list[str]:
    if keep_calls is None:
        return []
    return [fn.name for fn in module.functions
            if not fn.is_declaration and fn.name != root and keep_calls(fn.name)]


def _inline_launch_wrappers(module: llvm.ModuleRef) -> None:
    """Mark Numba's wrappers around a parallel loop's launch (``.kernel.<n>``: the GIL
    released around ``numba_parallel_for``, numba/np/ufunc/parallel.py) always inlined: the
    derivative of a launch reads which arrays its caller puts in the argument array, and
    through a wrapper's parameter it cannot."""
    for fn in module.functions:
        if fn.name.startswith(".kernel.") and not fn.is_declaration:
            fn.add_function_attribute("alwaysinline")


def _debug_inlining_restored(module: llvm.ModuleRef) -> llvm.ModuleRef:
    """``module`` with the ``noinline`` and ``optnone`` that Numba's full debug info puts on
    every function it lowers taken off again (``debug=True``, ``NUMBA_DEBUGINFO=1``,
    ``NUMBA_ENABLE_PROFILING=1``; numba/core/lowering.py), so they inline as without it.

    They are there for a debugger's sake; kept, a parallel loop's body stays a call, and its
    exception path reads the error it raised back through memory that the call wrote, which
    activity analysis cannot tell from the loop's floats. A function with a debug subprogram
    (``!dbg`` on its definition) is one Numba lowered; the runtime's own ``noinline`` helpers
    (``NRT_decref``) have none and keep theirs."""
    text = str(module)
    groups = dict(re.findall(r"^attributes #(\d+) = \{ (.*) \}$", text, flags=re.M))
    debug_only = re.compile(r'(?<![\w"-])(?:noinline|optnone)(?![\w"-]) ?')
    freed: dict[str, str] = {}  # group -> what a definition carries instead
    extra: list[str] = []
    number = max(map(int, groups), default=0)

    def free(match: re.Match) -> str:
        group = match.group(2)
        if not debug_only.search(groups.get(group, "")):
            return match.group(0)
        if group not in freed:
            rest = debug_only.sub("", groups[group]).strip()
            freed[group] = f" #{number + len(extra) + 1}" if rest else ""
            if rest:
                extra.append(f"attributes{freed[group]} = {{ {rest} }}")
        return f"{match.group(1)}{freed[group]}{match.group(3)}"

    text = re.sub(r"^(define [^\n]*?) #(\d+)( [^\n]*!dbg [^\n]*\{)$", free, text, flags=re.M)
    if not freed:
        return module
    return modules.parse(text + "\n" + "\n".join(extra) + "\n",
                         what="module with debug-only noinline taken off")


def _no_inline(module: llvm.ModuleRef, names: list[str]) -> llvm.ModuleRef:
    """``module`` with the functions ``names`` marked ``noinline`` (llvmlite cannot add a
    function attribute in place, so the definitions are rewritten in the text)."""
    text = str(module)
    for name in names:
        quoted = re.escape(f'@"{name}"') + "|" + re.escape(f"@{name}")
        text = re.sub(r'^(define [^\n]*?(?:' + quoted + r')\([^\n]*\)[^\n{]*?)( \{)$',
                      r"\1 noinline\2", text, count=1, flags=re.M)
    return modules.parse(text, what="module with rule-bearing functions kept")


def _as_dispatcher(f: Callable | Dispatcher) -> Dispatcher:
    if isinstance(f, Dispatcher):
        return f
    if callable(f) and hasattr(f, "__code__"):
        return numba.njit(f)
    raise CaptureError(
        f"cannot capture {f!r}: expected an @njit function or a plain Python function"
    )


def _recompiled(dispatcher: Dispatcher, cres: CompileResult, name: str):
    """``(dispatcher, cres)``, or a private copy and its compile result when ``cres`` or code
    it links was compiled without the hook (:func:`recapture.fresh`)."""
    try:
        return recapture.fresh(dispatcher, cres)
    except NumbaError as err:
        if hook.has_prelink(cres.library):  # only callees were stale: link them as they are
            return dispatcher, cres
        first = str(err).strip().splitlines()[0]
        raise CaptureError(f"Numba cannot compile {name}{cres.signature} again (it was "
                           f"compiled before pyzyme was imported): {first}") from err


def _signature_types(args: Any, name: str) -> tuple[tuple[types.Type, ...], types.Type | None]:
    """(argument types, return type or None) from a signature, a type tuple or example values."""
    if isinstance(args, (str, Signature)):
        try:
            argtypes, return_type = sigutils.normalize_signature(args)
        except (TypeError, NameError, SyntaxError) as err:
            raise CaptureError(f"cannot read signature {args!r}: {err}") from None
        return tuple(argtypes), return_type
    if not isinstance(args, (tuple, list)):
        raise CaptureError(
            f"expected the argument types of {name} as a tuple (of Numba types or of example "
            f"values); got {type(args).__name__}",
            hint="write capture(f, (x,)) for a single argument",
        )
    if all(isinstance(a, types.Type) for a in args):
        return tuple(args), None
    try:
        return tuple(numba.typeof(a) for a in args), None
    except ValueError as err:
        raise CaptureError(f"Numba cannot type an example argument of {name}: {err}") from None


def _compile(dispatcher: Dispatcher, argtypes, return_type, name: str) -> CompileResult:
    sig = argtypes if return_type is None else return_type(*argtypes)
    shown = ", ".join(map(str, argtypes))
    existing = dispatcher.overloads.get(tuple(argtypes))
    if existing is not None:
        return existing
    try:
        dispatcher.compile(sig)
    except NumbaError as err:
        first = str(err).strip().splitlines()[0]
        raise CaptureError(f"Numba cannot compile {name}({shown}): {first}") from err
    except RuntimeError as err:  # "compilation disabled": declared with explicit signatures
        declared = "; ".join("(" + ", ".join(map(str, s)) + ")" for s in dispatcher.signatures)
        raise CaptureError(
            f"{name} was declared for {declared} only, not ({shown}): {err}",
            hint="capture one of the declared signatures, or declare this one too",
        ) from None
    return dispatcher.overloads[tuple(argtypes)]


def _linked_prelink_module(
    root: numba_codegen.CPUCodeLibrary,
) -> tuple[llvm.ModuleRef, tuple[str, ...]]:
    """``root``'s own module with the own modules of all libraries it links, transitively.

    Linked libraries contribute their definitions as ``linkonce_odr``, as Numba links them, except
    Numba's runtime library, whose definitions are linked first and strong: they then replace
    any copy of ``NRT_incref``/``NRT_decref`` that a library compiled before the hook carries in
    its machine-code-rewritten form. Returns the module and the names of libraries for which only
    Numba's linked module was available.
    """
    module = _resolve_recursion(hook.prelink_module(root))
    runtime = _runtime_library()
    libraries = [lib for lib in _linked_libraries(root) if lib is not runtime]
    if runtime is not root:
        module.link_in(hook.prelink_module(runtime) or _fresh_runtime_module())
    stale: list[str] = []
    seen = {id(root), id(runtime)}
    while libraries:
        for library in libraries:
            seen.add(id(library))
            _link_library(module, library, stale)
        # Derivatives too large to link into their @njit callers are called through their
        # address: their IR is linked in its place (and, in the next round, the derivatives
        # they call so), so a derivative the captured code calls is differentiated in turn
        # (nested AD), as one small enough to be linked is.
        module, addressed = _resolve_addresses(module)
        libraries = []
        for library in addressed:
            libraries += [lib for lib in [library, *_linked_libraries(library)]
                          if id(lib) not in seen and lib is not runtime]
        libraries = list({id(lib): lib for lib in libraries}.values())
    return module, tuple(stale)


def _link_library(module: llvm.ModuleRef, library, stale: list[str]) -> None:
    part = hook.prelink_module(library)
    if part is None:
        stale.append(library.name)
        part = library._get_module_for_linking().clone()
    try:
        module.link_in(modules.module_for_linking(_resolve_recursion(part)))
    except RuntimeError as err:
        raise CaptureError(f"cannot link the IR of library {library.name!r}: {err}") from None


# Numba's pointer to a function called through its address (BaseContext.add_dynamic_addr)
_DYNAMIC_ADDRESS = re.compile(
    r'^(@"?numba\.dynamic\.globals\.[0-9a-f]+"?) = linkonce global ptr '
    r'inttoptr \(i64 (\d+) to ptr\)(?:, align \d+)?$', re.M)


def _resolve_addresses(module: llvm.ModuleRef) -> tuple[llvm.ModuleRef, list]:
    """``module`` with each pointer to a function of a module pyzyme compiled
    (:func:`~pyzyme.frontends.numba.bridge.addressed_function`) given that function's name as
    its constant value, and the libraries defining them, to link next: the optimizer then
    turns the calls into direct ones, as :func:`_resolve_recursion` does for recursion."""
    if not any(g.name.startswith("numba.dynamic.globals.") for g in module.global_variables):
        return module, []
    text = str(module)
    declared = set(re.findall(r'^(?:define|declare)[^@\n]*@"?([^"(\s]+)"?\(', text, re.M))
    libraries = {}

    def resolve(match: re.Match) -> str:
        found = bridge.addressed_function(int(match.group(2)))
        if found is None:
            return match.group(0)
        compiled, symbol = found
        libraries[id(compiled.library)] = compiled.library
        decl = "" if symbol in declared else f'\ndeclare void @"{symbol}"()'
        declared.add(symbol)
        return f'{match.group(1)} = internal constant ptr @"{symbol}"{decl}'

    text = _DYNAMIC_ADDRESS.sub(resolve, text)
    if not libraries:
        return module, []
    return (modules.parse(text, what="module with derivatives called by address linked"),
            list(libraries.values()))


_UNRESOLVED = re.compile(
    r'^(@"\.numba\.unresolved\$([^"]+)") = external (?:local_unnamed_addr )?global ptr'
    r'(?:, align \d+)?$', re.M)


def _resolve_recursion(module: llvm.ModuleRef) -> llvm.ModuleRef:
    """Recursive calls as direct calls.

    Numba compiles a call of a function to itself through a pointer it fills in when the code is
    loaded (``load ptr, ptr @".numba.unresolved$NAME"``); AD needs to see the callee. Giving the
    global ``@NAME`` as its constant value makes the reference visible to the linker (which then
    brings in ``NAME``'s definition) and lets the optimizer turn the call into a direct one.
    """
    text = str(module)
    if ".numba.unresolved$" not in text:
        return module
    declared = set(re.findall(r'^(?:define|declare)[^@\n]*@"?([^"(\s]+)"?\(', text, re.M))

    def resolve(match: re.Match) -> str:
        name = match.group(2)
        decl = "" if name in declared else f'\ndeclare void @"{name}"()'
        return f'{match.group(1)} = internal constant ptr @"{name}"{decl}'

    return modules.parse(_UNRESOLVED.sub(resolve, text), what="module with recursion resolved")


def _linked_libraries(root: numba_codegen.CPUCodeLibrary) -> list[numba_codegen.CPUCodeLibrary]:
    """The libraries ``root`` links, transitively, each after every library that links it.

    The order matters: LLVM's linker brings in a ``linkonce_odr`` definition only if the module
    linked so far refers to it, so a callee must be linked after all of its callers.
    """
    postorder, seen = [], {id(root)}

    def visit(library):
        for callee in [*library._linking_libraries, *_recursion_libraries(library)]:
            if id(callee) not in seen:
                seen.add(id(callee))
                visit(callee)
        postorder.append(library)

    visit(root)
    return postorder[-2::-1]  # reverse postorder, without root itself


def _recursion_libraries(library) -> list:
    """Libraries defining the functions ``library`` calls through Numba's unresolved-symbol
    pointers (recursive calls, possibly of another specialization of the same function)."""
    snapshot = hook.prelink_module(library)
    if snapshot is None:
        return []
    names = re.findall(r'@"\.numba\.unresolved\$([^"]+)"', str(snapshot))
    found = (hook.library_defining(name) for name in dict.fromkeys(names))
    return [lib for lib in found if lib is not None and lib is not library]


def _runtime_library():
    return rtsys.library


def _fresh_runtime_module() -> llvm.ModuleRef:
    # Numba's runtime library is compiled once, at the first compilation in the process; if that
    # happened before the hook, its IR is regenerated (not recompiled: NRT_incref would then be
    # defined twice in the JIT).
    from numba.core.registry import cpu_target

    ir_module, _unfinalized_library = nrtdynmod.create_nrt_module(cpu_target.target_context)
    return modules.parse(str(ir_module), what="Numba runtime module")


def _declare_env_globals(text: str) -> str:
    """Turn Numba's environment pointer definitions into declarations, dropping unused ones."""

    def replace(match: re.Match) -> str:
        name = match.group(1)
        uses = len(re.findall(re.escape(name) + r'(?![\w.$"])', text)) - 1  # minus the definition
        return f"{name} = external global ptr" if uses else ""

    return _ENV_GLOBAL.sub(replace, text)
