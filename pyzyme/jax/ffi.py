"""XLA FFI handlers for kernels: native functions, compiled by Numba, that XLA calls on CPU.

A handler is ``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)`` (XLA's FFI C ABI, ``c_api.h`` of
the headers shipped in ``jax.ffi.include_dir()``). XLA calls it once with the metadata
extension in the call frame, to learn the FFI version it was written for, then once per
execution; it reads the data pointer of each argument and result buffer and calls the
kernel's ``store`` on arrays over them, without copying. Shapes are fixed when the handler is
made (one handler per kernel and shapes), so nothing is decoded but the pointers, and no
Python runs on the call path.

The offsets below are those of the structs in ``c_api.h`` (FFI API 0.3, jaxlib 0.10) on a
64-bit target; a later layout would come with a new major version of the API, which XLA checks
against the version the handler reports.
"""

from __future__ import annotations

import ctypes
import itertools

import jax
import numba
import numpy as np
from llvmlite import ir as llvm_ir
from numba import carray, types
from numba.core import cgutils
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic

from pyzyme.jax.kernels import Kernel, loop

__all__ = ["target_name"]

# c_api.h, in 8-byte words: XLA_FFI_CallFrame {struct_size, extension_start, api, ctx,
# stage (an enum, padded), args {struct_size, extension_start, size, types, args},
# rets {struct_size, extension_start, size, types, rets}, attrs {...}, future}
_FRAME_WORDS, _EXTENSION, _STAGE_INT32, _ARGS, _RETS = 20, 1, 8, 9, 14
# XLA_FFI_Buffer {struct_size, extension_start, dtype (padded), data, rank, dims}
_BUFFER_WORDS, _DATA = 6, 3
# XLA_FFI_Extension_Base {struct_size, type (padded), next}, then the Metadata extension's
# XLA_FFI_Metadata* metadata; XLA_FFI_Metadata {struct_size, api_version {struct_size,
# extension_start, int major, int minor}, uint32 traits, type id}
_EXTENSION_TYPE, _METADATA, _METADATA_EXTENSION = 1, 3, 1
_EXECUTE = 3                   # XLA_FFI_ExecutionStage_EXECUTE
# XLA_FFI_Api {struct_size, extension_start, api_version (3 words), internal_api,
# XLA_FFI_Error_Create, ...}; XLA_FFI_Error_Create_Args {struct_size, extension_start,
# message, errc}, its STRUCT_SIZE up to errc
_API, _ERROR_CREATE, _ERROR_ARGS_SIZE, _ERROR_INTERNAL = 2, 6, 28, 13
_API_MAJOR, _API_MINOR = 0, 3  # XLA_FFI_API_MAJOR / MINOR of the headers these follow
_VERSION_STRUCT_SIZE = 28      # XLA_FFI_Api_Version_STRUCT_SIZE: up to minor_version


@intrinsic
def _pointer(typingctx, address):
    """The address (an int64 read out of an XLA struct) as a ``void*``."""
    sig = types.voidptr(types.int64)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))
    return sig, codegen


@intrinsic
def _error(typingctx, api, message):
    """``api->XLA_FFI_Error_Create({message, INTERNAL})``: the error a handler returns, made
    by XLA (which copies the message) through the API table it passed in the call frame."""
    sig = types.voidptr(types.int64, types.int64)

    def codegen(context, builder, sig, args):
        i64 = llvm_ir.IntType(64)
        ptr = context.get_value_type(types.voidptr)
        fields = cgutils.alloca_once(builder, llvm_ir.ArrayType(i64, 4))
        for k, value in enumerate([llvm_ir.Constant(i64, _ERROR_ARGS_SIZE),
                                   llvm_ir.Constant(i64, 0), args[1],
                                   llvm_ir.Constant(i64, _ERROR_INTERNAL)]):
            builder.store(value, cgutils.gep_inbounds(builder, fields, 0, k))
        table = builder.inttoptr(args[0], i64.as_pointer())
        slot = builder.load(cgutils.gep_inbounds(builder, table, _ERROR_CREATE))
        create = builder.inttoptr(slot, llvm_ir.FunctionType(ptr, [ptr]).as_pointer())
        return builder.call(create, [builder.bitcast(fields, ptr)])
    return sig, codegen


_HANDLER = """\
def handler(frame):
    words = carray(frame, {frame_words}, np.int64)
    if words[{extension}] != 0:
        ext = carray(_pointer(words[{extension}]), 4, np.int64)
        if (ext[1] & 0xffffffff) == {metadata_extension}:
            meta = carray(_pointer(ext[{metadata}]), 6, np.int64)
            meta32 = carray(_pointer(ext[{metadata}]), 12, np.int32)
            meta[1] = {version_size}
            meta[2] = 0
            meta32[6] = {major}
            meta32[7] = {minor}
            meta32[8] = 0
            return _pointer(0)
    if carray(frame, {frame_words} * 2, np.int32)[{stage}] != {execute}:
        return _pointer(0)
    args = carray(_pointer(words[{args}]), {nargs}, np.int64)
    rets = carray(_pointer(words[{rets}]), {nrets}, np.int64)
{decode}
    try:
        store({call})
    except Exception:  # noqa: BLE001  (the message is the user's kernel's, to see outside jit)
        return _error(words[{api}], {message})
{back}
    return _pointer(0)
"""

_TARGETS: dict[int, tuple[str, object]] = {}
_COUNT = itertools.count()


def _buffer(table: str, i: int, shape: tuple, dtype: np.dtype) -> str:
    header = f"carray(_pointer({table}[{i}]), {_BUFFER_WORDS}, np.int64)[{_DATA}]"
    return f"carray(_pointer({header}), {shape or (1,)!r}, np.{dtype.name})"


def _handler_source(kernel: Kernel, message: int) -> str:
    # Arrays over XLA's buffers have no NRT meminfo. pyzyme's second derivatives (forward
    # over forward or reverse) crash when a shadow they are passed has none, so from the
    # second order on, the buffers are copied into arrays Numba allocates (and results
    # copied back); first-order kernels and the user's kernel work on XLA's buffers directly.
    copy = kernel.order >= 2
    decode, call, back = [], [], []
    for i, s in enumerate(kernel.ins):
        buffer = _buffer("args", i, s.shape, s.dtype)
        if copy and s.shape:
            decode += [f"    b{i} = {buffer}", f"    a{i} = np.empty_like(b{i})"]
            decode += loop(s.shape, f"a{i}[{{i}}] = b{i}[{{i}}]")
        else:
            decode.append(f"    a{i} = {buffer}" + ("" if s.shape else "[0]"))
        call.append(f"a{i}")
    for j, s in enumerate(kernel.outs):
        buffer = _buffer("rets", j, s.shape, s.dtype)
        if copy:
            decode += [f"    r{j} = {buffer}", f"    o{j} = np.empty_like(r{j})"]
            back += loop(s.shape or (1,), f"r{j}[{{i}}] = o{j}[{{i}}]")
        else:
            decode.append(f"    o{j} = {buffer}")
        call.append(f"o{j}")
    decode_after = "\n".join(back)
    return _HANDLER.format(
        frame_words=_FRAME_WORDS, extension=_EXTENSION, metadata_extension=_METADATA_EXTENSION,
        metadata=_METADATA, version_size=_VERSION_STRUCT_SIZE, major=_API_MAJOR,
        minor=_API_MINOR, stage=_STAGE_INT32, execute=_EXECUTE, args=_ARGS, rets=_RETS,
        nargs=max(len(kernel.ins), 1), nrets=max(len(kernel.outs), 1),
        decode="\n".join(decode), call=", ".join(call), back=decode_after, api=_API,
        message=message)


def target_name(kernel: Kernel) -> str:
    """The FFI target that runs ``kernel`` on CPU, its handler compiled and registered with
    XLA on first use (once per kernel)."""
    made = _TARGETS.get(id(kernel))
    if made is None:
        with global_compiler_lock:
            made = _TARGETS.get(id(kernel))
            if made is None:
                message = ctypes.create_string_buffer(
                    f"pyzyme.jax: {kernel.name} raised an exception inside an XLA computation; "
                    f"call it on the same arguments outside JAX to see it".encode())
                scope = {"np": np, "carray": carray, "_pointer": _pointer, "_error": _error,
                         "store": kernel.store}
                source = _handler_source(kernel, ctypes.addressof(message))
                exec(compile(source, f"<pyzyme.jax: handler of {kernel.name}>", "exec"),
                     scope)  # noqa: S102  (our own source)
                handler = numba.cfunc(types.voidptr(types.voidptr))(scope["handler"])
                name = f"pyzyme_{next(_COUNT)}"
                jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler.ctypes),
                                            platform="cpu")
                # The kernel and the error message are kept with the handler: XLA holds
                # its address, so none may go while the process can still call it.
                made = _TARGETS[id(kernel)] = (name, (handler, kernel, message))
    return made[0]
