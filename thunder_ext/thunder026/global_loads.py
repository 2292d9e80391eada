"""A global read by one call of the dict lookaside that thunder's own reading ends in, not by two interpreted frames.

thunder 0.2.6's ``LOAD_GLOBAL`` handler reads a global with ``globals_lookup``, which interprets a small function
``lambda d, k: d[k]`` on the function's globals (and, for a builtin, once more on ``__builtins__``); its
``BINARY_SUBSCR`` interprets thunder's ``getitem_impl``, whose ``obj.__getitem__(index)`` is dispatched, as a bound
method of a builtin, to the lookaside of ``dict.__getitem__``, which gives the item's wrapper (one per key, made at
its first read, with the record of a subscript of the globals). A global is read a few thousand times in the first
call of an HF decoder layer: those frames were a third of the instructions the interpreter ran for it.

Rule: where the interpreter tracks provenance and the globals (and, for a name they lack, their ``__builtins__``)
are exactly a ``dict`` holding the name, the item is read by ``_interpret_call(dict.__getitem__, ...)``, which goes
through the same lookaside with the same wrapped dict and key, and the interpreter's callbacks and the extension's
detectors on that lookaside see the same read. A builtins module (``__builtins__`` in ``__main__``) is read by
``getattr`` as thunder reads it; anything else (a name nowhere, another mapping) goes to thunder's
``globals_lookup``, which raises the ``NameError``. In the extension's compilations only.

Retired by: thunder reading a global without interpreting a function.
"""

from __future__ import annotations

import types
from functools import partial
from typing import Any

from thunder.core import interpreter
from thunder.core.interpreter import INTERPRETER_SIGNALS, WrappedValue, _interpret_call, unwrap, wrap_const

from thunder_ext.thunder026.scope import compiling_with_extension

_thunders = interpreter.globals_lookup


def _read(mapping: WrappedValue, key: WrappedValue) -> Any:
    return _interpret_call(dict.__getitem__, mapping, key)


def _globals_lookup(globals_dict: Any, name: Any) -> Any:
    held, key = unwrap(globals_dict), unwrap(name)
    if (
        type(held) is not dict or not isinstance(globals_dict, WrappedValue) or not isinstance(name, WrappedValue)
        or not interpreter.get_interpretercompilectx()._with_provenance_tracking or not compiling_with_extension()
    ):  # fmt: skip
        return _thunders(globals_dict, name)
    if key in held:
        return _read(globals_dict, name)
    builtins = held.get("__builtins__")
    if type(builtins) is dict and key in builtins:
        read_builtin = _read
    elif isinstance(builtins, types.ModuleType) and hasattr(builtins, key):
        read_builtin = partial(_interpret_call, getattr)
    else:
        return _thunders(globals_dict, name)
    wrapped = _read(globals_dict, wrap_const("__builtins__"))
    return wrapped if wrapped is INTERPRETER_SIGNALS.EXCEPTION_RAISED else read_builtin(wrapped, name)


def install() -> None:
    interpreter.globals_lookup = _globals_lookup  # ``LOAD_GLOBAL``'s handler looks it up by name at each read
