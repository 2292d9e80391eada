"""A function the interpreter runs in place of another, in the extension's compilations only.

``interpret_instead(original, substitute)``: where a compilation that carries an ``ExtensionTransform`` calls
``original``, thunder's interpreter interprets ``substitute`` with the same arguments, as it would have interpreted
``original`` (so a module's parameters it reads are the prologue's, as ever); every other compilation interprets
``original`` as thunder does. An integration uses it for a model's code that thunder 0.2.6 cannot trace and an
equal one it can (litgpt's mixture of experts: ``thunder_ext/integrations/litgpt_moe.py``).

Written for thunder 0.2.6: its interpreter's lookaside table. Retired by: thunder tracing ``original`` itself.
"""

from __future__ import annotations

import types
from collections.abc import Callable

from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import _interpret_call
from thunder.core.jit_ext import _general_jit_lookaside_map

from thunder_ext.thunder026.scope import compiling_with_extension


def _same_code(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` as another function object: the lookaside, keyed by ``fn``, does not see it, so it is interpreted."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    return copy


def interpret_instead(original: types.FunctionType, substitute: Callable, *,
                      differentiated: Callable | None = None) -> None:  # fmt: skip
    """In the extension's compilations, interpret ``substitute`` wherever ``original`` is called (module docstring);
    ``differentiated``, if given, where the call is traced with grad enabled (thunder's own record of the mode,
    which follows the traced code's ``no_grad``; a compilation's entries are kept by that mode)."""
    as_thunder_does = _same_code(original)

    def lookaside(*args, **kwargs):
        if not compiling_with_extension():
            return _interpret_call(as_thunder_does, *args, **kwargs)
        grad = differentiated is not None and get_compile_data().is_grad_enabled
        return _interpret_call(differentiated if grad else substitute, *args, **kwargs)

    _general_jit_lookaside_map[original] = lookaside
