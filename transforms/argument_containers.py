"""Guard the lists, tuples and dicts of the arguments: a compiled program runs only for calls that hold the same.

thunder 0.2.6's prologue checks the length of ``args`` and ``kwargs`` and unpacks by index or key each element the
trace read, but nothing else of a list, tuple or dict among the arguments. So ``for p, g in zip(ps, gs):
p.add_(g, alpha=-0.1)``, traced with two tensors in each list, ran for a call with four and updated two of them,
silently, in stock thunder as in the extension; a dict of other keys in another order was iterated in the traced
order.

Rule: where an argument is a list, tuple or dict, the prologue checks on every call that each list, tuple and dict
among the arguments, nested, has the traced call's type, length and keys in order (``containers``); a call that
does not is a miss, which thunder sends to another entry or compiles. What the call held is taken while thunder
traces it (``thunder_ext/thunder026/traced_call.py``): a prologue holds no values.
"""

from __future__ import annotations

from thunder.core.prims import PrimIDs
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

from thunder_ext.executors.checks import check_argument_containers
from thunder_ext.thunder026.traced_call import traced_containers


def guard_argument_containers(prologue_trace: TraceCtx, computation_trace: TraceCtx) -> TraceCtx:
    """Add the check of the traced call's lists, tuples and dicts to the prologue, where it has any."""
    traced = traced_containers()
    if traced is None:
        return prologue_trace
    unpacked = {b.output.name: b.output for b in prologue_trace.bound_symbols if b.sym.id == PrimIDs.UNPACK_TRIVIAL}
    *body, ret = prologue_trace.bound_symbols
    checked = from_trace(prologue_trace)
    with tracectx(checked):
        check = check_argument_containers.bind(unpacked["args"], unpacked["kwargs"], traced, output=None)
    checked.bound_symbols = [*body, check, ret]  # after thunder's own checks, which fail first where they do
    checked.set_provenance(TraceProvenance("thunder_ext: guard argument containers"))
    return checked
