"""Refuse a differentiated write into an argument that requires grad before anything runs.

Rule: where the computation holds a write that thunder differentiates into storage an argument that
requires grad shares (``functionalize`` rule 5 leaves those writes to thunder), the prologue refuses every
call, naming the op, the argument and the line:

- into a leaf, with eager's ``RuntimeError`` ("a leaf Variable that requires grad is being used in an in-place
  operation."); thunder checks only when its ``copy_`` runs, after the writes before it have landed;
- into a non-leaf (a tensor an earlier op computed), with ``ArgumentWriteGradientError``: eager rebases its
  history onto the write, but thunder 0.2.6's backward gives no gradient to the value before the write (and an
  output that reads only the written value does not require grad), so its gradient would be silently lost.

The prologue runs before all of the computation's writes, so a refused call leaves every input as it was.
Whether the argument requires grad is part of thunder's cache key; whether it is a leaf only picks the message.
"""

from __future__ import annotations

from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

from thunder_ext.executors.checks import check_written_arguments_need_no_grad
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.gradients import differentiated_writes_left_to_thunder
from thunder_ext.transforms.op_kinds import source_line, thunder_inplace_write


def refuse_differentiated_writes_into_arguments(prologue_trace: TraceCtx, computation_trace: TraceCtx) -> TraceCtx:
    """Add the refusal to the prologue of a computation with differentiated writes into arguments."""
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
        check = check_written_arguments_need_no_grad.bind(
            computation_args, tuple(positions), tuple(described), output=None
        )
    checked.bound_symbols = [*body, check, ret]  # after thunder's own checks
    checked.set_provenance(TraceProvenance("thunder_ext: refuse differentiated writes into arguments"))
    return checked
