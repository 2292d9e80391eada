"""No fusion region recomputes a value across a write: by construction before fusion, verified after it.

thunder's rematerialization (in nvFuser's and torch.compile's fusion passes) lets a region recompute values
of an earlier region from that one's inputs instead of receiving them. Across a write, a recomputed read of
the written storage sees the new value, a recomputed op that made the storage makes it again without the
write, and a recomputed write runs twice. thunder's ``find_cut`` never recomputes an op tagged
``RANDOM_OP``, whose second run gives another value, which is what each of those ops is once the write has
run (where thunder's cut leaves a value the producer returns anyway to be recomputed from the producer's inputs,
the pinned ops included, ``thunder_ext/thunder026/rematerialization.py`` adds it to the cut).

Rule (``pin_reads_of_overwritten_storage``, run just before the fusion passes): every op that writes, and
every op that reads the data of a storage some later op writes, or makes that storage, is tagged so, with all
its subsymbols (a fusion pass may flatten an op into them). Views and renames read no data and make no
storage: recomputed, they name the same one, and what reads it through them is pinned where it must read the
old value. They stay free, as thunder's autodiff needs: it saves for the backward what the backward reads,
and where the backward's region recomputes a rename of an argument, the argument itself is saved, before any
region that writes it, where ``clone_saved_values_written_later`` can clone it.

``recomputations_across_writes`` checks the regions afterwards and names any recomputation that reads or
makes storage written since the value was first computed, or that writes: the checker raises on it, since
only a pass that broke the rule can produce one.
"""

from __future__ import annotations

from collections.abc import Sequence

from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.thunder026.tables import RECOMPUTING_DIFFERS
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.op_kinds import data_args, is_update_aliases, is_view_op, tensor_outs, written_tensors


def _pinned(bsym: BoundSymbol) -> BoundSymbol:
    """``bsym`` and its subsymbols, tagged as not to be recomputed (new bound symbols: traces share the old)."""
    return bsym.from_bsym(tags=bsym.tags | {RECOMPUTING_DIFFERS}, subsymbols=[_pinned(s) for s in bsym.subsymbols])


def _storage_touched(bsym: BoundSymbol) -> list[TensorProxy]:
    """The tensors ``bsym`` reads the data of, and those it makes: none for a view or a rename."""
    return [] if is_view_op(bsym) or is_update_aliases(bsym) else [*data_args(bsym), *tensor_outs(bsym)]


def pin_reads_of_overwritten_storage(trace: TraceCtx) -> TraceCtx:
    """Tag every write, and every op that reads or makes a storage a later op writes, so that no
    rematerialization recomputes them (module docstring). Runs on the trace the fusion passes receive."""
    aliases = Aliases(trace.bound_symbols)
    written_later: set[str] = set()  # storage keys
    pinned: list[BoundSymbol] = []
    for bsym in reversed(trace.bound_symbols):
        writes = [aliases.storage_key(t) for t in written_tensors(bsym)]
        if writes or any(aliases.storage_key(t) in written_later for t in _storage_touched(bsym)):
            bsym = _pinned(bsym)
        written_later.update(writes)
        pinned.append(bsym)
    new = from_trace(trace)
    new.bound_symbols = pinned[::-1]
    new.set_provenance(TraceProvenance("Pin reads of overwritten storage (thunder_ext)"))
    return new


def recomputations_across_writes(bsyms: Sequence[BoundSymbol], aliases: Aliases) -> list[str]:
    """Each op of a region that recomputes a value an earlier region computed, and writes, or reads or makes
    a storage written since the earlier region computed it (later in that region, between the two, or earlier in
    its own region): what ``pin_reads_of_overwritten_storage`` rules out, described for an error. A write before
    the value's first computation, in its region or earlier, is one both computations read after."""
    computed_at: dict[str, tuple[int, int]] = {}  # value -> (slot, position in it) of its first computation
    last_written: dict[str, tuple[int, int]] = {}  # storage key -> (slot, position in it) of its latest write
    found = []
    for j, bsym in enumerate(bsyms):
        ops = bsym.subsymbols if bsym.sym.is_fusion else [bsym]
        for k, op in enumerate(ops):
            outs = [o.name for o in op.flat_proxy_outs]
            first = min((computed_at[o] for o in outs if o in computed_at), default=None)
            if bsym.sym.is_fusion and first is not None and first[0] < j:
                since = [
                    t.name for t in _storage_touched(op) if last_written.get(aliases.storage_key(t), first) > first
                ]
                if written_tensors(op) or since:
                    what = "writes again" if written_tensors(op) else f"touches {', '.join(since)} overwritten"
                    earlier = bsyms[first[0]].sym.name
                    found.append(f"`{bsym.sym.name}` recomputes {', '.join(outs)} of `{earlier}`, and {what}")
            if bsym.sym.is_fusion:
                for o in outs:
                    computed_at.setdefault(o, (j, k))
            last_written.update((aliases.storage_key(t), (j, k)) for t in written_tensors(op))
    return found
