"""No fusion pass is offered a write that no region can keep: one of a value that no op computes.

Rule (``keep_uncomputed_writes_out_of_regions``, run just before the fusion passes): a ``copy_to_out_``
whose ``computed`` no op of the trace computes (an argument, the result of another write) reaches the fusion
passes as nothing they can fuse, and so does a rename that only such writes read.

No executor's region keeps such a write: a region that only copies an input into another runs no kernel of
its own for it (nvFuser's rule 2), and Inductor would write a region input as it stands later in the region
(torch.compile's rule 1). Fused, the write would be given back after grouping, splitting its region in two
(``fusion_regions.take_out``); kept out, thunder's grouping fuses the ops around it into one region where
dataflow allows, as it does around any op no fusion executor claims. The rule depends on the trace alone,
not on what a region holds, which is what lets it act before the regions exist; the executors' rules still
judge every write a region holds afterwards.

``Executor.can_fuse`` looks through an op to its subsymbols, so the write loses them (``thunder_op_id``
still knows it for ``copy_to_out_`` by the operator the extension's executor registered for it), and the
rename becomes the PyTorch executor's, which no fusion executor claims.
"""

from __future__ import annotations

from thunder.core import utils
from thunder.core.prims import PrimIDs
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace
from thunder.executors import torchex

from thunder_ext.executors.torch_inplace import plain_copy_to_out
from thunder_ext.transforms.op_kinds import is_copy_to_out, unpacks_an_argument


def _computes(producer: BoundSymbol | None) -> bool:
    return producer is not None and not unpacks_an_argument(producer) and not is_copy_to_out(producer)


def keep_uncomputed_writes_out_of_regions(trace: TraceCtx) -> TraceCtx:
    """Bind each write of a value no op computes, and each rename only such writes read, in a form no fusion
    pass fuses (module docstring). Runs on the trace the fusion passes receive."""
    producers, consumers = utils.producers(trace), utils.consumers(trace)
    kept_out: set[int] = set()  # ids of the bound symbols kept out
    for bsym in reversed(trace.bound_symbols):  # a rename's readers come after it
        if bsym.sym is plain_copy_to_out:
            keep = not _computes(producers.get(bsym.args[0], None))
        elif bsym.sym.id in (PrimIDs.UPDATE_ALIASES, torchex.update_aliases.id):
            readers = [r for o in bsym.flat_proxy_outs for r in consumers.get(o, ())]
            keep = bool(readers) and all(id(r) in kept_out for r in readers)
        else:
            keep = False
        if keep:
            kept_out.add(id(bsym))
    if not kept_out:
        return trace
    new = from_trace(trace)
    new.bound_symbols = [_unfusible(b) if id(b) in kept_out else b for b in trace.bound_symbols]
    new.set_provenance(TraceProvenance("Keep uncomputed writes out of regions (thunder_ext)"))
    return new


def _unfusible(bsym: BoundSymbol) -> BoundSymbol:
    if bsym.sym is plain_copy_to_out:
        return bsym.from_bsym(subsymbols=[])
    return bsym.from_bsym(sym=torchex.update_aliases, subsymbols=[])
