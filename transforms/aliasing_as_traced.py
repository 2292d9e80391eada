"""Written storage is shared at run time as the trace shares it, even where nvFuser would share it otherwise.

Rule (``keep_written_storage_aliased_as_traced``, in ``inplace_ex``'s fusion pass, after the saved-value clones are
made): an op that nvFuser would run with other aliasing than thunder's semantics gives it (below) runs on the
PyTorch executor, out of any region, where a write of the trace overwrites the storage it reads or makes, and
nvFuser would fuse it (the first fusion executor that can fuse it is one whose ``RegionRules`` say
``aliases_by_prims``). A torch.compile executor with ``required_ops`` (thunder's defaults hold
``torchcompile_xentropy``, which can fuse a CUDA ``sum``) fuses an op only in a group that holds one of those
ops, so it is not counted as taking the op: on an H100 it was, and the sum of a written one-element tensor went
back into nvFuser's region and came back as a view (``found_4c28956511b5``, again).

Why: nvFuser runs an op as its prims, and aliases what its prims alias. Its alias analysis returns a region's
output as a view of a region input wherever only "meta" ops lie between them (reshape, ``set``, slice, broadcast,
squeeze, expand), so

- a copy may come back as a view: it builds thunder's ``clone`` as a ``set``, a reduction over size-1
  (broadcast) axes as a ``squeeze``, one of a 0-d tensor or a conversion to the dtype a tensor has as a ``set``.
  A later write of the input changes what the region returned, and a write of the copy writes the input: on an
  H100, ``r = a0.sum(); a0.add_(a1); return r`` with a one-element ``a0`` returned the new sum
  (``tests/fuzz_regressions/cuda/found_4c28956511b5.py``; stock thunder's regions return such a sum, clone or
  ``amax`` as views too), the CPU stand-in found ``c = x.clone(); c.zero_()`` zeroing ``x``
  (``fake_nvfuser/found_4fe1460e4cca``), and a clone the backward reads (``transforms/saved_for_backward.py``)
  would be no copy;
- a view may come back as a copy: thunder's ``diagonal`` is a view made of a ``take``, a gather. A write through it
  was lost on an H100 (``r1 = a0 * -2; r1.diagonal().fill_(-2); return r1``, cuda/found_2096e1fb38e9).

The PyTorch executor's ops alias as thunder's semantics says. What it costs: such an op moves no more than its
input's bytes, and only one whose storage is written leaves the regions (a kernel of its own where a region held
it); what a region computes from its result, it computes as before.

Rule 2 (``cse_keeping_written_storage_apart``, wrapped around nvFuser's fusion pass's own common-subexpression
elimination): a trace where that elimination would remove an op that makes a new tensor, while the trace writes the
storage of a tensor some op made, keeps its ops as they were. The elimination makes two ops with equal arguments one
tensor; where one of them is written afterwards, the other then reads the write. On an H200, ``r1 = a0 * -2;
r3 = a0 * -2; r1.zero_(); return r1, r3`` returned zeros for ``r3`` (cuda/found_f21d632c7a6c), and with ``r3``
written too, both writes went into one tensor (an ``InplaceOrderingError``, cuda/found_571d7c9ccf0f). The test is
coarse on purpose (any written intermediate, any tensor removed): the rewrite that functionalization makes leaves
few writes of intermediates, and a trace that keeps its twins computes each once more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from thunder.core.compile_data import get_compile_data
from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace
from thunder.extend import Executor, FusionExecutor

from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.op_kinds import is_view_op, located_at, tensor_args, tensor_outs, written_tensors
from thunder_ext.transforms.regions.rules import aliases_by_prims
from thunder_ext.transforms.traced import on_torch_executor

_REDUCTIONS = frozenset({PrimIDs.SUM, PrimIDs.PROD, PrimIDs.AMAX, PrimIDs.AMIN})


def _prims(bsym: BoundSymbol) -> list[BoundSymbol]:
    return [bsym] if bsym.sym.is_prim or not bsym.subsymbols else [p for s in bsym.subsymbols for p in _prims(s)]


def nvfuser_may_run_as_a_view(prim: BoundSymbol) -> bool:
    """Whether nvFuser may run ``prim``, a copy in thunder's semantics, as a meta op of its input."""
    if prim.sym.id in (PrimIDs.CLONE, PrimIDs.STRIDE_ORDER):
        return True
    (a, *_) = tensor_args(prim) or (None,)
    if not isinstance(a, TensorProxy) or not isinstance(prim.output, TensorProxy):
        return False
    if prim.sym.id == PrimIDs.CONVERT_ELEMENT_TYPE:
        return prim.output.dtype == a.dtype
    if prim.sym.id in _REDUCTIONS:
        dims = prim.args[1]
        return a.ndim == 0 or all(a.shape[d] == 1 for d in dims)
    return False


def nvfuser_aliases_otherwise(bsym: BoundSymbol) -> bool:
    """Whether nvFuser, running ``bsym`` as its prims, may alias its result otherwise than thunder's semantics does:
    a copy whose prims are views and copies nvFuser runs as meta ops (one of the latter at least), or a view
    some of whose prims are no views."""
    copies = [p for p in _prims(bsym) if not is_view_op(p)]
    if is_view_op(bsym):
        return bool(copies)
    return bool(copies) and all(map(nvfuser_may_run_as_a_view, copies))


def keep_written_storage_aliased_as_traced(trace: TraceCtx, *, executors: Sequence[Executor] | None = None) -> TraceCtx:
    """Run on the PyTorch executor each op of which ``nvfuser_aliases_otherwise``, whose input or result shares
    storage with a tensor a write of the trace overwrites, and which the first fusion executor of ``executors`` (by
    default the compilation's) that can fuse it would fuse aliasing by prims (the module's rule; an earlier fusion
    executor, thunder's torch.compile executor ahead of nvFuser, groups the op first; one with ``required_ops``
    groups it only beside one of those, so it takes nothing for sure). Runs on the trace the fusion passes receive."""
    if executors is None:
        executors = getattr(get_compile_data(), "executors_list", ())
    fusers = [e for e in executors if isinstance(e, FusionExecutor)]
    if not any(map(aliases_by_prims, fusers)):  # every compilation without nvFuser: no scan of the trace
        return trace
    written = [w for b in trace.bound_symbols for w in written_tensors(b)]
    if not written:
        return trace
    aliases = Aliases(trace.bound_symbols)
    overwritten = {aliases.storage_key(w) for w in written}

    def aliased_otherwise(bsym: BoundSymbol) -> bool:
        # the input's storage written (later reads of the copy would see it), or the copy's (the write would land
        # in the input): ``c = x.clone(); c.zero_()`` zeroed ``x`` where nvFuser returned the clone as a view
        touched = [*tensor_args(bsym)[:1], *tensor_outs(bsym)]
        if not (any(aliases.storage_key(t) in overwritten for t in touched) and nvfuser_aliases_otherwise(bsym)):
            return False
        fuser = next((f for f in fusers if f.can_fuse(bsym) and not getattr(f, "required_ops", None)), None)
        return fuser is not None and aliases_by_prims(fuser)

    bsyms: list[BoundSymbol] = []
    moved = False
    for bsym in trace.bound_symbols:
        if aliased_otherwise(bsym):
            # without subsymbols: ``Executor.can_fuse`` looks through an op to them
            bsyms += [located_at(b.from_bsym(subsymbols=[]), bsym) for b in on_torch_executor(bsym)]
            moved = True
        else:
            bsyms.append(bsym)
    if not moved:
        return trace
    new = from_trace(trace)
    new.bound_symbols = bsyms
    new.set_provenance(TraceProvenance("Written storage aliased as traced (thunder_ext)"))
    return new


def cse_keeping_written_storage_apart(cse: Callable[[TraceCtx], TraceCtx]) -> Callable[[TraceCtx], TraceCtx]:
    """``cse``, a fusion pass's common-subexpression elimination, except on a trace where it would make a new
    tensor one with another while the trace writes the storage of a tensor some op made (the module's rule 2)."""

    def cse_unless_it_merges_written_storage(trace: TraceCtx) -> TraceCtx:
        eliminated = cse(trace)
        return trace if _merges_written_storage(trace, eliminated) else eliminated

    return cse_unless_it_merges_written_storage


def _merges_written_storage(before: TraceCtx, after: TraceCtx) -> bool:
    ops = [p for b in before.bound_symbols for p in (b.subsymbols if b.sym.is_fusion else (b,))]
    written = [w for b in ops for w in written_tensors(b)]
    if not written:
        return False
    kept = {o.name for b in after.bound_symbols for p in (b.subsymbols if b.sym.is_fusion else (b,)) for o in tensor_outs(p)}
    if all(is_view_op(b) or all(o.name in kept for o in tensor_outs(b)) for b in ops):
        return False  # nothing new made one with another (views of one tensor share its storage anyway)
    aliases = Aliases(ops)
    arguments = {aliases.storage_key(a) for a in before.args if isinstance(a, TensorProxy)}
    return any(aliases.storage_key(w) not in arguments for w in written)
