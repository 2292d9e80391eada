"""Errors of in-place ops that name the op and the tensors, as eager PyTorch's do.

thunder 0.2.6 traces ``k.index_copy_(2, pos, new)`` into its out-of-place op and a copy back, and a bad
input fails deep inside, with a message that names neither the op nor the tensor: "Expected dtype
thunder.dtypes.float32 but found thunder.dtypes.float64!". This module wraps the trace-time function
(the ``meta``) of every in-place symbol thunder registers, so that the error says which op failed, the
tensor it writes into and the other tensors it was given (dtype, shape), the user's line that called it
(which names the tensors as the program does), then thunder's text. The error keeps thunder's type and
is raised while tracing, before anything runs, except that a number or another non-tensor where the op
takes a tensor only is a ``TypeError``, as in eager (thunder raises ``ValueError``). ``adapt_thunder``
wraps the metas, for the extension's compilations only.

What fails only when it runs (an index out of range) fails in the op's kernel: ``named_runtime_error``
names it the same way for the executor that ran it (``executors/torch_inplace.py``).
"""

from __future__ import annotations

import functools
import inspect
import linecache
import re
from collections.abc import Callable
from types import FrameType
from typing import Any

import thunder.torch as ltorch
import torch
from thunder.core.interpreter import get_interpreterruntimectx
from thunder.core.proxies import TensorProxy

_NAMED = "_thunder_ext_names_the_op"  # set on an error already named, so that nested in-place ops name it once
# thunder's printer puts the user's line above the statements traced from it (``TraceCtx.python``)
_SOURCE_COMMENT = re.compile(r"^  # (.+):(\d+): \t(.*)$")


def describe(name: str, value: TensorProxy | torch.Tensor) -> str:
    dtype = str(value.dtype).removeprefix("thunder.dtypes.").removeprefix("torch.")
    return f"{name} ({dtype}, shape {tuple(value.shape)})"


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


def computation_user_line(frame: FrameType) -> str:
    """`` at file:line: source`` of the user's code that the statement running in ``frame``, a computation
    thunder generated from a trace, was traced from; "" where the computation shows none."""
    for line in reversed(linecache.getlines(frame.f_code.co_filename)[: frame.f_lineno - 1]):
        if not line.strip():  # the statements of one user line follow its comment with no blank line
            break
        if match := _SOURCE_COMMENT.match(line):
            filename, lineno, source = match[1], match[2], match[3].strip()
            return f" at {filename}:{lineno}" + (f": `{source}`" if source else "")
    return ""


def _bound(signature: inspect.Signature | None, args: tuple, kwargs: dict) -> dict[str, Any]:
    try:
        return signature.bind(*args, **kwargs).arguments if signature is not None else {}
    except TypeError:  # thunder's own error is about the arguments themselves
        return {}


def _not_a_tensor(signature: inspect.Signature | None, bound: dict[str, Any]) -> TypeError | None:
    """Eager's error type for a non-tensor where the op takes a tensor only, naming the argument."""
    for name, value in bound.items():
        if signature.parameters[name].annotation == "TensorLike" and not isinstance(value, TensorProxy):
            return TypeError(f"`{name}` must be a tensor, got {type(value).__name__} {value!r}")
    return None


def named_error(op: str, bound: dict[str, Any], error: Exception, where: str) -> Exception:
    """``error`` again, its text prefixed with the op, the tensor it writes, its other tensor inputs and
    ``where`` the user's code called it."""
    tensors = [(name, v) for name, v in bound.items() if isinstance(v, (TensorProxy, torch.Tensor))]
    if not tensors:
        return error
    (_, written), rest = tensors[0], tensors[1:]
    given = f" from {', '.join(describe(n, v) for n, v in rest)}" if rest else ""
    text = f"{op}: cannot write into {describe('self', written)}{given}{where}: {error}"
    try:
        named = type(error)(text)
    except Exception:  # an error type that does not take one message: keep thunder's error as it is
        return error
    setattr(named, _NAMED, True)
    return named


def named_runtime_error(op: str, args: tuple, kwargs: dict, error: Exception, caller: FrameType) -> Exception:
    """``error`` of the in-place op ``op`` (its name in ``thunder.torch``) as an executor ran it with ``args``,
    named as a trace-time error is; ``caller`` is the frame of thunder's computation that ran the executor."""
    meta = getattr(ltorch, op).meta
    return named_error(op, _bound(_signature(meta), args, kwargs), error, computation_user_line(caller))


def _signature(meta: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(meta)
    except (TypeError, ValueError):
        return None


def naming_errors(op: str, meta: Callable, *, when: Callable[[], bool]) -> Callable:
    """``meta``, the trace-time function of the in-place op ``op``, raising its errors named where ``when()``."""
    signature = _signature(meta)

    @functools.wraps(meta)
    def meta_naming_errors(*args, **kwargs):
        try:
            return meta(*args, **kwargs)
        except Exception as error:
            if getattr(error, _NAMED, False) or not when():
                raise
            bound = _bound(signature, args, kwargs)
            named = named_error(op, bound, _not_a_tensor(signature, bound) or error, user_line())
            if named is error:
                raise
            raise named from error

    meta_naming_errors.names_errors = True
    return meta_naming_errors
