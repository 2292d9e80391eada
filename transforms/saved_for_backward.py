"""What the forward saves for the backward keeps the value it had when saved.

Rule: in a forward trace of thunder's autodiff (``TraceTag.AUGMENTED_FORWARD``), no op writes storage
that a saved tensor may share once that tensor exists. Where one would, the forward saves a clone,
taken just before the first such write, and the backward reads the clone.

The trace the rule forbids, from ``y = x * buf; buf.add_(1)`` with ``x`` requiring grad::

    (t24,) = update_aliases((buf,))
    t25 = mul(x, t24)                    # the gradient of x is t24 * (the gradient of t25)
    t28 = copy_to_out_(t27, out=t24)     # buf + 1, written into buf
    return {...}, ((t24,), ())           # so the backward would read buf + 1

Eager PyTorch refuses that backward (its version counter sees the write), and stock thunder computes
it from the new value. Here the backward computes the gradient of the values the forward read.
Thunder's own writes (``copy_``) count as much as the extension's.
"""

from __future__ import annotations

from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import TraceCtx, TraceProvenance, TraceTag, from_trace, tracectx
from thunder.core.vjp_utils import get_saved_for_backward_tensors, set_saved_for_backward_tensors
from thunder.executors import torchex

from thunder_ext.transforms.aliasing import Aliases, written_tensors


def saved_values_outlive_writes(trace: TraceCtx) -> TraceCtx:
    """Save a clone of each saved tensor that a later write would overwrite (see the module's rule)."""
    if TraceTag.AUGMENTED_FORWARD not in trace.tags:
        return trace
    saved = [t for t in get_saved_for_backward_tensors(trace) if t is not None]
    if not saved or not any(written_tensors(b) for b in trace.bound_symbols):
        return trace
    aliases = Aliases(trace.bound_symbols)
    new_trace = from_trace(trace)
    defined = {p.name for p in tree_flatten((trace.args, trace.kwargs))[0] if isinstance(p, TensorProxy)}
    clones: dict[str, TensorProxy] = {}
    bsyms = []
    for bsym in trace.bound_symbols:
        written = written_tensors(bsym)
        for s in saved:
            if s.name in defined and s.name not in clones and any(aliases.may_overlap(s, w) for w in written):
                with tracectx(new_trace):
                    clones[s.name] = TensorProxy(like=s)
                bsyms.append(torchex.clone.bind(s, output=clones[s.name]))
        bsyms.append(bsym)
        defined.update(o.name for o in bsym.flat_proxy_outs)
    if not clones:
        return trace
    new_trace.bound_symbols = bsyms
    set_saved_for_backward_tensors(new_trace, [clones.get(t.name, t) if t is not None else None for t in get_saved_for_backward_tensors(trace)])
    new_trace.set_provenance(TraceProvenance("thunder_ext: save clones of saved tensors that a write overwrites"))
    return new_trace
