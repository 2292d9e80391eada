"""The interpreter's prologue checks, kept and made without comparing each with all before it.

thunder 0.2.6's ``JitCtx.add_constraint`` drops a check equal to one it has by comparing it with every check
recorded so far: quadratic in the checks of a compilation, about 1,300 on SmolLM2's 30 layers, where every
parameter, buffer and module value read is checked. ``add_constraint`` here keeps the same list in the same order
and drops the same duplicates, finding them in a set of the checks' keys (a proxy by its ``variableify``, as
thunder compares it); a check holding a value that cannot be hashed is compared with the other such checks, as
thunder does.

Its ``unpack_inputs`` then gives each check's proxy the name of the prologue's output it stands for by a ``list.index``
over the outputs (quadratic again: every tensor's check at 80 layers scans about 800 outputs). ``unpacking_inputs``
finds them in a dict instead, for the checks of the tensors' metadata and of numbers whose proxies are all outputs
(nearly all of them; thunder unpacks those outputs before any check), and makes those checks after thunder's loop
over the others, before the prologue's return: the same checks, later in its text. Both are installed by
``adapt_thunder`` for every compilation: they change no check, only its cost and place.

Retired by: thunder keeping its constraints in a set, and its outputs in a dict.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from thunder import clang
from thunder.core import jit_ext, prims
from thunder.core.proxies import Proxy, ProxyInterface, Variable, variableify
from thunder.core.trace import tracectx

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


# the checks that read their proxies and nothing else (a tensor's other checks, a DTensor's, unpack more)
_OF_OUTPUTS = (clang.check_tensor_shape_and_metadata, clang.check_number_type_and_value)


def unpacking_inputs(unpack_inputs: Callable) -> Callable:
    """thunder's ``unpack_inputs``, given only the checks it must unpack more for; the others made after it."""

    def unpack(ctx, prologue_trace, pro_to_comp_inps, pro_to_epi_inps, args, kwargs):
        outputs: dict[Variable, Proxy] = {}
        for v in (*pro_to_epi_inps, *pro_to_comp_inps):  # thunder looks in the epilogue's first, each list in order
            v = variableify(v)
            outputs.setdefault(v, v.proxy)
        theirs, ours = [], []
        for prim, *cargs in ctx._constraints:
            proxies = [a for a in cargs if isinstance(a, Proxy)]
            if prim in _OF_OUTPUTS and all(variableify(a) in outputs for a in proxies) and not any(
                isinstance(s, Proxy) for a in proxies for s in getattr(a, "shape", ())):  # fmt: skip
                ours.append((prim, *(outputs[variableify(a)] if isinstance(a, Proxy) else a for a in cargs)))
            else:
                theirs.append((prim, *cargs))
        ctx._constraints = theirs
        result = unpack_inputs(ctx, prologue_trace, pro_to_comp_inps, pro_to_epi_inps, args, kwargs)
        returned = prologue_trace.bound_symbols.pop()
        assert returned.sym.id == prims.PrimIDs.RETURN, returned
        with tracectx(prologue_trace):
            for prim, *cargs in ours:
                prim(*cargs)
        prologue_trace.bound_symbols.append(returned)
        ctx._constraints = theirs + ours
        return result

    return unpack


def install() -> None:
    jit_ext.JitCtx.add_constraint = add_constraint
    jit_ext.unpack_inputs = unpacking_inputs(jit_ext.unpack_inputs)
