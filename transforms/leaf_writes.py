"""Refuse a differentiated write into a leaf that requires grad before anything runs, as eager refuses it.

Rule: where the computation holds a write that thunder differentiates into storage an argument that
requires grad shares (``functionalize`` rule 5 leaves those writes to thunder), the prologue checks on
every call that the argument is no leaf, and otherwise raises eager's ``RuntimeError`` ("a leaf Variable
that requires grad is being used in an in-place operation.") naming the op, the argument and the line.
Thunder checks only when its ``copy_`` runs, after the writes before it have landed; the prologue runs
before all of them, so a refused call leaves every input as it was.

Whether an argument is a leaf is not part of thunder's cache key, so this is a check, not a guard that
sends a call elsewhere: a non-leaf (a tensor an earlier op computed) is written as thunder writes it.
"""

from __future__ import annotations

from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

from thunder_ext.executors.checks import check_no_leaf_written
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.gradients import differentiated_writes_left_to_thunder
from thunder_ext.transforms.op_kinds import source_line, thunder_inplace_write


def refuse_differentiated_writes_into_leaves(prologue_trace: TraceCtx, computation_trace: TraceCtx) -> TraceCtx:
    """Add the leaf check to the prologue of a computation with differentiated writes into arguments."""
    aliases = Aliases(computation_trace.bound_symbols)
    writes = differentiated_writes_left_to_thunder(computation_trace, aliases)
    if not writes:
        return prologue_trace
    positions, described = [], []
    for i, arg in enumerate(computation_trace.args):
        if not (isinstance(arg, TensorProxy) and arg.requires_grad):
            continue
        first = next((w for w in writes if aliases.same_storage(thunder_inplace_write(w)[1], arg)), None)
        if first is not None:
            where = f" ({line})" if (line := source_line(first)) else ""
            positions.append(i)
            described.append(f"`{first.sym.name}` writes into argument `{arg.name}`{where}")
    *body, ret = prologue_trace.bound_symbols
    ((computation_args, _),) = ret.args  # the prologue returns (computation inputs, epilogue inputs)
    checked = from_trace(prologue_trace)
    with tracectx(checked):
        check = check_no_leaf_written.bind(computation_args, tuple(positions), tuple(described), output=None)
    checked.bound_symbols = [*body, check, ret]  # after thunder's own checks
    checked.set_provenance(TraceProvenance("thunder_ext: refuse differentiated writes into leaves"))
    return checked
