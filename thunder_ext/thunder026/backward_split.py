"""thunder 0.2.6's rule for what of a joint forward-and-backward trace goes into the backward.

thunder's autograd groups the joint trace (forward and backward in one, before the fusion passes) and splits
it afterwards (``split_into_forward_and_backward``, ``thunder/transforms/autodiff.py``), so a pass between the
two that must know which ops the backward runs (``transforms/saved_for_backward.py``) reads the rule here, a
copy of thunder's. Retired by: thunder exposing the split as a function of the joint trace, or tagging the
backward's ops.
"""

from __future__ import annotations

from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_iter
from thunder.core.trace import TraceCtx


def backward_ops(trace: TraceCtx) -> set[int]:
    """The ids of the bound symbols of a joint trace that the split puts into the backward: those the forward's
    outputs do not need, nor ``get_grad``, nor a ``copy_`` into what the forward needs."""
    returned = trace.bound_symbols[-1].args[0]
    needed = {p.name for p in tree_iter((returned["fw_flat_out"], returned["flat_args"])) if isinstance(p, Proxy)}
    backward = set()
    for bsym in reversed(trace.bound_symbols[:-1]):
        if bsym.sym.id in (PrimIDs.GET_GRAD, PrimIDs.UNPACK_TRIVIAL):
            continue
        copies_into_forward = bsym.sym.name == "copy_" and bsym.args[1].name in needed
        if copies_into_forward or any(o.name in needed for o in bsym.flat_proxy_outs):
            needed |= {p.name for p in (*bsym.flat_proxy_args, *bsym.flat_proxy_outs)}
        else:
            backward.add(id(bsym))
    return backward
