"""A user's ``assert`` on a tensor's value, checked when the computation runs, before anything is written.

thunder 0.2.6 interprets ``assert cond`` as Python compiles it: a conditional jump on ``cond`` past
``LOAD_ASSERTION_ERROR; RAISE_VARARGS``. The jump's handler calls ``bool(cond)``
(``thunder/core/interpreter.py``, ``_pop_jump_forward_if_true_handler_3_11``), and ``TensorProxy.__bool__``
raises ("casting a TensorProxy to a Python boolean is not supported (data dependency)",
``thunder/core/proxies.py``): a cache that checks its bounds (``assert pos + n <= max_len``) does not trace.

``adapt_thunder`` wraps the handlers of those jumps, for the extension's compilations only. Where the value
tested is a tensor of one element and one of the jump's two ways leads to ``LOAD_ASSERTION_ERROR``, the
wrapper records ``checked_assert(cond, holds, message, where)`` (``executors/torch_inplace.py``) and takes the
other way: the computation raises eager's ``AssertionError`` (its message where the assert's is a constant,
none where it has none; the user's line in a note) when ``bool(cond) != holds``. Functionalization
(``transforms/functionalize.py``, rule 3) takes it for an op that may fail: every later write comes after it,
and so does every later op that may fail (``functionalize._Functionalizer.emit``), so that an index the assert
guards fails as eager fails, at the assert.

Any other branch on a tensor (``if t.any():``, an ``assert`` of several elements, an ``assert`` whose message
is computed) fails as before, with the user's line and the entry point that runs it: ``thunder_ext.thunderfx``,
where Dynamo splits the graph at the branch (and turns an ``assert`` into a check of its own).
"""

from __future__ import annotations

import dis
import functools
import math
from collections.abc import Callable
from types import CodeType

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.interpreter import do_raise, wrap_const
from thunder.core.jit_ext import record_source_loc_in_symbol_header
from thunder.core.proxies import TensorProxy

from thunder_ext.executors.torch_inplace import checked_assert
from thunder_ext.inplace_errors import user_line

# The conditional jumps of Python 3.11 and later, by name, and the truth value on which each jumps
JUMPS = {
    "POP_JUMP_IF_TRUE": True,
    "POP_JUMP_FORWARD_IF_TRUE": True,
    "POP_JUMP_BACKWARD_IF_TRUE": True,
    "POP_JUMP_IF_FALSE": False,
    "POP_JUMP_FORWARD_IF_FALSE": False,
    "POP_JUMP_BACKWARD_IF_FALSE": False,
}

_COMPUTED = object()  # the assert's message is computed where it fails: no check can give it


def _assertion(co: CodeType, inst: dis.Instruction, jumps_on: bool) -> tuple[bool, object] | None:
    """``(holds, message)`` where the jump ``inst`` of ``co`` tests an ``assert``: the assert holds where the
    value tested is ``holds``; ``message`` is the tuple of the ``AssertionError``'s arguments, or ``_COMPUTED``.
    None where neither way of the jump raises an ``AssertionError``."""
    insts = list(dis.get_instructions(co))
    at = {i.offset: k for k, i in enumerate(insts)}
    k = at[inst.offset]
    falls, jumps = k + 1, at.get(inst.argval)
    if falls < len(insts) and insts[falls].opname == "LOAD_ASSERTION_ERROR":
        raises, holds = falls, jumps_on
    elif jumps is not None and insts[jumps].opname == "LOAD_ASSERTION_ERROR":
        raises, holds = jumps, not jumps_on
    else:
        return None
    between = []
    for i in insts[raises + 1 :]:
        if i.opname == "RAISE_VARARGS":
            break
        between.append(i)
    if not between:
        return holds, ()
    first, *call = between
    if first.opname == "LOAD_CONST" and all(i.opname in ("PRECALL", "CALL") for i in call):
        return holds, (first.argval,)
    return holds, _COMPUTED


def _one_element(t: TensorProxy) -> bool:
    return all(type(d) is int for d in t.shape) and math.prod(t.shape) == 1


def _check(condition: TensorProxy, holds: bool, message: tuple, note: str) -> None:
    # a boolean condition, as ``bool`` takes the tensor: no gradient flows through it, and functionalization
    # may rename it to order the check (rule 3)
    if not dtypes.is_boolean_dtype(condition.dtype):
        condition = ltorch.ne(condition, 0)
    checked_assert(condition, holds, message, note)


def _refuse(what: str, where: str):
    return do_raise(
        NotImplementedError(
            f"{what}{where}: thunder_ext.jit traces no branch on what the computation computes "
            "(a data dependency); thunder_ext.thunderfx runs it (Dynamo splits the graph there, or checks an "
            "assert when it runs)"
        )
    )


def checking_tensor_asserts(handler: Callable, jumps_on: bool, *, when: Callable[[], bool]) -> Callable:
    """The opcode handler ``handler`` of a jump on ``jumps_on``, with an ``assert`` on a tensor checked at runtime
    where ``when()``, and any other branch on a tensor refused naming the user's line."""

    @functools.wraps(handler)
    def handle(inst: dis.Instruction, /, *, stack, co: CodeType, **kwargs):
        if not isinstance(stack[-1], TensorProxy) or not when():
            return handler(inst, stack=stack, co=co, **kwargs)
        condition: TensorProxy = stack.pop()
        where = user_line()
        assertion = _assertion(co, inst, jumps_on)
        if assertion is None:
            return _refuse("a branch on a tensor's value", where)
        holds, message = assertion
        if message is _COMPUTED:
            return _refuse("an assert whose message is computed where it fails", where)
        if not _one_element(condition):
            return _refuse(f"an assert on a tensor of shape {tuple(condition.shape)}", where)
        note = f"assert{where} (checked by thunder_ext.jit before the writes after it)"
        record_source_loc_in_symbol_header(_check)(condition, holds, message, note)
        stack.append(wrap_const(holds))  # the way on which the assert holds: tracing goes on there
        return handler(inst, stack=stack, co=co, **kwargs)

    return handle
