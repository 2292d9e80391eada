"""``narrow`` traced as the slice it is where thunder differentiates the trace.

Rule (``trace_narrows_as_slices``, on the computation trace, where an argument requires grad): every ``narrow`` of a
tensor at a constant start becomes ``getitem`` with that slice: the same elements of the same storage, one view.
thunder 0.2.6 registers ``narrow`` automatically, so it differentiates it through torch's own autograd
(``narrow_vjp``), whose Python its torch.compile executor fuses into a region that Dynamo cannot always trace
("Attempted to call function marked as skipped ... optree"; the fuzzer's ``requires_grad/found_de492dd7cc1a``,
stock ``thunder.jit`` alike where its regions take it). A slice has thunder's own gradient rule. A trace without
a ``narrow``, or that thunder does not differentiate, is returned as it came.
"""

from __future__ import annotations

import thunder.torch as ltorch
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.transforms.gradients import arguments_requiring_grad
from thunder_ext.transforms.op_kinds import located_at, thunder_op_id
from thunder_ext.transforms.traced import traced_ops


def narrow_as_slice(t: TensorProxy, dim: int, start: int, length: int) -> TensorProxy:
    """``t.narrow(dim, start, length)`` as ``getitem``. Traced: call it inside ``traced_ops``."""
    dim = dim % t.ndim
    start = start % t.shape[dim] if t.shape[dim] else start
    return ltorch.getitem(t, (slice(None),) * dim + (slice(start, start + length),))


def _constant_narrow(bsym: BoundSymbol) -> tuple | None:
    """``narrow``'s ``(tensor, dim, start, length)`` where each but the tensor is a Python int; else None."""
    if thunder_op_id(bsym) != ltorch.narrow.id:
        return None
    names = ("input", "dim", "start", "length")
    args = (*bsym.args, *(bsym.kwargs[n] for n in names[len(bsym.args) :] if n in bsym.kwargs))
    if len(args) != 4 or not all(type(a) is int for a in args[1:]):
        return None
    return args


def trace_narrows_as_slices(trace: TraceCtx) -> TraceCtx:
    """Trace each ``narrow`` at a constant start as the slice it is, where thunder differentiates ``trace``."""
    if not arguments_requiring_grad(trace) or not any(map(_constant_narrow, trace.bound_symbols)):
        return trace
    new = from_trace(trace)
    renamed: dict = {}  # each narrow's result -> its slice's
    for bsym in trace.bound_symbols:
        bsym = bsym.from_bsym_swap_proxies(renamed, skip_output=True) if renamed else bsym
        if (args := _constant_narrow(bsym)) is None:
            new.bound_symbols.append(bsym)
            continue
        sliced, bsyms = traced_ops(new, lambda args=args: narrow_as_slice(*args))
        new.bound_symbols += [located_at(b, bsym) for b in bsyms]
        renamed[variableify(bsym.output)] = sliced
    new.set_provenance(TraceProvenance("thunder_ext: narrow as the slice it is"))
    return new
