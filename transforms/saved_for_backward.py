"""What the forward saves for the backward keeps the value it had when saved.

Rule: no op of the backward reads a tensor of the forward whose storage a write of the forward may have
overwritten since; where one would, the backward reads a clone taken before the write.

The trace the rule forbids, from ``y = x * buf; buf.add_(1)`` with ``x`` requiring grad::

    (t24,) = update_aliases((buf,))
    t25 = mul(x, t24)                    # the gradient of x is t24 * (the gradient of t25)
    t28 = copy_to_out_(t27, out=t24)     # buf + 1, written into buf
    return {...}, ((t24,), ())           # so the backward would read buf + 1

Eager PyTorch refuses that backward (its version counter sees the write), and stock thunder computes
it from the new value. Here the backward computes the gradient of the values the forward read. The same
where one region makes the tensor and overwrites it (``requires_grad/found_029b3c3825ff``, under
thunder's torch.compile executor; stock thunder alike), so that no op lies between the two::

    [t26, t36, t41] = TorchCompile0(a0, a1, a2)
      # t48 = copy_to_out_(t18, out=t16)   # a0 + a1, written into a0
      # (t25, t26) = update_aliases((t22, t48))
      # t49 = copy_to_out_(t29, out=t26)   # a0 * a2, written over it: the gradient of a2 reads a0 * a2
    return {...}, ((t26,), ())

Two passes keep the rule:

1. ``clone_saved_values_before_writes``, in ``inplace_ex``'s fusion pass, on the joint trace thunder 0.2.6
   differentiates into (forward and backward in one trace, split after the fusion passes): each tensor the
   backward will read that a later ``copy_to_out_`` may overwrite is cloned where it is made, the backward
   reads the clone, and the write lists the clone in its ``after``. The clone is then a reader of the old
   value like any other: thunder's split keeps it in the forward (a forward op reads it), grouping and
   rematerialization order it before the write (``transforms/no_recomputation.py`` pins it), and the
   region rules judge it as any reader of the old value.
2. ``clone_saved_values_written_later``, after the split, on the forward trace: a saved tensor that a later op
   writes (thunder's own ``copy_``, which has no ``after``) is saved as a clone taken just before that op.
"""

from __future__ import annotations

import thunder.torch as ltorch
from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.pytree import tree_flatten, tree_iter
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, TraceTag, from_trace, tracectx
from thunder.core.vjp_utils import get_saved_for_backward_tensors, set_saved_for_backward_tensors
from thunder.executors import torchex

from thunder_ext.thunder026.backward_split import backward_ops
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.op_kinds import is_copy_to_out, tensor_args, tensor_outs, written_tensors
from thunder_ext.transforms.traced import traced_ops


def clone_saved_values_written_later(trace: TraceCtx) -> TraceCtx:
    """Save a clone of each saved tensor that a later write would overwrite (the module's second pass)."""
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


def clone_saved_values_before_writes(trace: TraceCtx) -> TraceCtx:
    """In a joint forward and backward trace, clone each tensor the backward reads that a later write may
    overwrite, where it is made; the backward reads the clone, each such write lists it in its ``after`` (the
    module's first pass). A tensor that a write without ``after`` (thunder's ``copy_``) may overwrite is left
    to ``clone_saved_values_written_later``. Runs on the trace the fusion passes receive."""
    if not _is_joint(trace):
        return trace
    backward = backward_ops(trace)
    # a write the forward does not need is the backward's by thunder's split, but reads nothing of the forward
    readers = {id(b) for b in trace.bound_symbols if id(b) in backward and not written_tensors(b)}
    read = {t.name: t for b in trace.bound_symbols if id(b) in readers for t in tensor_args(b)}
    aliases = Aliases(trace.bound_symbols)
    arguments = (t for t in tree_iter((trace.args, trace.kwargs)) if isinstance(t, TensorProxy))
    made_at = {t.name: -1 for t in arguments if t.name in read}  # where each is made: -1, an argument
    writes: dict[str, list[int]] = {}  # each tensor made -> the positions of the writes that may overwrite it
    for i, bsym in enumerate(trace.bound_symbols):
        for w in written_tensors(bsym):
            for name in made_at:
                if aliases.may_overlap(read[name], w):
                    writes.setdefault(name, []).append(i)
        if id(bsym) not in backward:
            made_at.update((o.name, i) for o in tensor_outs(bsym) if o.name in read and o.name not in made_at)
    cloned = [n for n, at in writes.items() if all(is_copy_to_out(trace.bound_symbols[i]) for i in at)]
    if not cloned:
        return trace
    new = from_trace(trace)
    clones: dict[int, list[BoundSymbol]] = {}  # position -> the clones made right after it
    swap, after = {}, {}
    for name in cloned:
        clone = _clone(new, read[name])
        clones.setdefault(made_at[name], []).append(clone)
        swap[variableify(read[name])] = clone.output
        for i in writes[name]:
            after.setdefault(i, []).append(clone.output)
    bsyms = [*clones.get(-1, ())]
    for i, bsym in enumerate(trace.bound_symbols):
        if id(bsym) in readers:
            bsym = bsym.from_bsym_swap_proxies(swap, skip_output=True)
        elif i in after:
            bsym = _ordered_after(bsym, after[i])
        bsyms += [bsym, *clones.get(i, ())]
    new.bound_symbols = bsyms
    new.set_provenance(TraceProvenance("Clone saved values before writes (thunder_ext)"))
    return new


def _is_joint(trace: TraceCtx) -> bool:
    """Whether ``trace`` is the joint forward and backward trace that thunder's autograd splits."""
    last = trace.bound_symbols[-1] if trace.bound_symbols else None
    if last is None or last.sym.id != PrimIDs.RETURN or not isinstance(last.args[0], dict):
        return False
    return "fw_flat_out" in last.args[0] and any(b.sym.id == PrimIDs.GET_GRAD for b in trace.bound_symbols)


def _clone(trace: TraceCtx, t: TensorProxy) -> BoundSymbol:
    """``ltorch.clone(t)``, traced into a bound symbol of ``trace`` with its decomposition."""
    _, (clone,) = traced_ops(trace, lambda: ltorch.clone(t))
    return clone


def _ordered_after(write: BoundSymbol, clones: list[TensorProxy]) -> BoundSymbol:
    """``write`` with ``clones`` added to its ``after``, and to that of the ``copy_to_out_`` it calls."""
    kwargs = {**write.kwargs, "after": (*write.kwargs.get("after", ()), *clones)}
    subsymbols = [_ordered_after(s, clones) if is_copy_to_out(s) else s for s in write.subsymbols]
    return write.from_bsym(kwargs=kwargs, subsymbols=subsymbols)
