"""Trace-time errors of in-place ops that name the op and the tensors, as eager PyTorch's do.

thunder 0.2.6 traces ``k.index_copy_(2, pos, new)`` into its out-of-place op and a copy back, and a bad
input fails deep inside, with a message that names neither the op nor the tensor: "Expected dtype
thunder.dtypes.float32 but found thunder.dtypes.float64!". This module wraps the trace-time function
(the ``meta``) of every in-place symbol thunder registers, so that the error says which op failed, the
tensor it writes into and the other tensors it was given (dtype, shape), the user's line that called it
(which names the tensors as the program does), then thunder's text. The error keeps thunder's type and
is raised while tracing, before anything runs. Like ``thunder_gaps``, it adapts thunder's own tables at
import, so stock ``thunder.jit`` gains it too.
"""

from __future__ import annotations

import functools
import inspect
import linecache
from collections.abc import Callable
from typing import Any

import thunder.torch as ltorch
from thunder.core.interpreter import get_interpreterruntimectx
from thunder.core.proxies import TensorProxy

_NAMED = "_thunder_ext_names_the_op"  # set on an error already named, so that nested in-place ops name it once


def describe(name: str, value: TensorProxy) -> str:
    return f"{name} ({str(value.dtype).removeprefix('thunder.dtypes.')}, shape {tuple(value.shape)})"


def user_line() -> str:
    """`` at file:line: source`` of the user's code being traced, or "" outside thunder's interpreter."""
    try:
        filename, positions = get_interpreterruntimectx().get_current_user_source_location()
    except Exception:  # not interpreting (a trace built by hand, a transform): no user line to show
        return ""
    if filename is None or positions is None:
        return ""
    source = linecache.getline(filename, positions.lineno).strip()
    return f" at {filename}:{positions.lineno}" + (f": `{source}`" if source else "")


def named_error(op: str, signature: inspect.Signature | None, args: tuple, kwargs: dict, error: Exception) -> Exception:
    """``error`` again, its text prefixed with the op, the tensor it writes and its other tensor inputs."""
    try:
        bound = signature.bind(*args, **kwargs).arguments if signature is not None else {}
    except TypeError:  # thunder's own error is about the arguments themselves
        bound = {}
    tensors = [(name, v) for name, v in bound.items() if isinstance(v, TensorProxy)]
    if not tensors:
        return error
    (_, written), rest = tensors[0], tensors[1:]
    given = f" from {', '.join(describe(n, v) for n, v in rest)}" if rest else ""
    text = f"{op}: cannot write into {describe('self', written)}{given}{user_line()}: {error}"
    try:
        named = type(error)(text)
    except Exception:  # an error type that does not take one message: keep thunder's error as it is
        return error
    setattr(named, _NAMED, True)
    return named


def _naming_errors(op: str, meta: Callable) -> Callable:
    try:
        signature = inspect.signature(meta)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(meta)
    def meta_naming_errors(*args, **kwargs):
        try:
            return meta(*args, **kwargs)
        except Exception as error:
            if getattr(error, _NAMED, False):
                raise
            named = named_error(op, signature, args, kwargs, error)
            if named is error:
                raise
            raise named from error

    meta_naming_errors.names_errors = True
    return meta_naming_errors


def _install() -> None:
    # thunder tags ``copy_`` as no in-place op, yet it is the one every other write ends in
    for symbol in (*ltorch._inplace_to_out_of_place, ltorch.copy_):
        if symbol.meta is not None and not getattr(symbol.meta, "names_errors", False):
            # Symbol is a frozen dataclass; its hash and equality do not involve ``meta``
            object.__setattr__(symbol, "meta", _naming_errors(symbol.name, symbol.meta))


_install()
