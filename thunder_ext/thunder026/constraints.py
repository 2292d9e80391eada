"""The interpreter's prologue checks, kept without comparing each new one with all before it.

thunder 0.2.6's ``JitCtx.add_constraint`` drops a check equal to one it has by comparing it with every check
recorded so far: quadratic in the checks of a compilation, about 1,300 on SmolLM2's 30 layers, where every
parameter, buffer and module value read is checked. ``add_constraint`` here keeps the same list in the same order
and drops the same duplicates, finding them in a set of the checks' keys (a proxy by its ``variableify``, as
thunder compares it); a check holding a value that cannot be hashed is compared with the other such checks, as
thunder does. Installed by ``adapt_thunder`` for every compilation: it changes no check, only its cost.

Retired by: thunder keeping its constraints in a set.
"""

from __future__ import annotations

from collections.abc import Hashable

from thunder.core import jit_ext
from thunder.core.proxies import ProxyInterface, variableify

_thunders = jit_ext.JitCtx.add_constraint
_INDEX = "_thunder_ext_constraint_index"


def _key(constraint: tuple) -> Hashable:
    """The constraint as thunder compares it: its function, then each argument, a proxy by its variable. Raises
    ``TypeError`` where an argument cannot be hashed."""
    key = (len(constraint), constraint[0], *(variableify(a) if isinstance(a, ProxyInterface) else a for a in constraint[1:]))
    hash(key)
    return key


def add_constraint(ctx: jit_ext.JitCtx, constraint: tuple) -> None:
    index = getattr(ctx, _INDEX, None)
    if index is None or index[0] is not ctx._constraints:  # thunder replaces the list once interpretation ends
        index = (ctx._constraints, set(), [])  # the list it indexes, the keys, the unhashable constraints
        for c in ctx._constraints:
            _file(index, c)
        setattr(ctx, _INDEX, index)
    try:
        key = _key(constraint)
    except TypeError:
        _thunders(_Unhashable(index[2]), constraint)  # thunder's comparison, among the unhashable ones only
        if index[2] and index[2][-1] is constraint:
            ctx._constraints.append(constraint)
        return
    if key not in index[1]:
        index[1].add(key)
        ctx._constraints.append(constraint)


def _file(index: tuple, constraint: tuple) -> None:
    try:
        index[1].add(_key(constraint))
    except TypeError:
        index[2].append(constraint)


class _Unhashable:
    """What ``JitCtx.add_constraint`` reads of its context: the list it compares with and appends to."""

    def __init__(self, constraints: list) -> None:
        self._constraints = constraints


def install() -> None:
    jit_ext.JitCtx.add_constraint = add_constraint
