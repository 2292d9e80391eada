"""What the extension keeps of the call thunder traces: the lists, tuples and dicts of its arguments, nested.

thunder 0.2.6's prologue checks the length of ``args`` and ``kwargs`` and unpacks each element the trace read, but
not the length of a list among the arguments: a step traced for ``step(ps, gs)`` with two tensors in each list ran
for a call with four, updating two, silently, in stock thunder as in the extension (issue 60). The prologue holds
no values, so the lengths are taken from the call itself, while thunder traces it: ``thunder_general_jit`` is
wrapped to keep, for the extension's compilations, ``containers`` of its arguments, which
``transforms/argument_containers.py`` then adds to the prologue as a check.

Retired by: thunder checking the length of each sequence and the keys of each dict it unpacks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import thunder

from thunder_ext.executors.checks import Containers, containers
from thunder_ext.thunder026.scope import compiling_with_extension

_TRACED: ContextVar[Containers | None] = ContextVar("thunder_ext_traced_containers", default=None)
_thunders = thunder.thunder_general_jit


def traced_containers() -> Containers | None:
    """``containers`` of the arguments of the call the extension's compilation traced last in this context."""
    return _TRACED.get()


@contextmanager
def no_traced_call() -> Iterator[None]:
    """A compilation nested in another's tracing whose arguments are flat tensors (a block program's): the outer
    call's containers are not its own, so none are checked."""
    token = _TRACED.set(None)
    try:
        yield
    finally:
        _TRACED.reset(token)


def _thunder_general_jit(fn: Any, args: tuple, kwargs: dict, /, **options: Any) -> Any:
    nested = any(isinstance(a, (list, tuple, dict)) for a in (*args, *kwargs.values()))  # else thunder checks all
    _TRACED.set(containers((args, kwargs)) if nested and compiling_with_extension() else None)
    return _thunders(fn, args, kwargs, **options)


def install() -> None:
    thunder.thunder_general_jit = _thunder_general_jit  # thunder's jit calls it by the name it imported
