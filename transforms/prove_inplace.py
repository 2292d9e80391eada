"""The aliasing checker: prove a ``copy_to_out_`` safe to run in place, or leave it a copy.

It runs on the final execution trace, after every pass that may reorder, so what it proves holds
for the order that will run. For each write ``w = copy_to_out_(c, out=o)`` it checks:

1. *Ordering* (never waived): no op after the write reads a tensor sharing ``o``'s storage except
   through ``w`` (or aliases derived from ``w``). A violation means some pass moved the write above
   a reader of the old value; no executor can repair that, so it raises ``InplaceOrderingError``.
2. *Aliasing*, for ``c``'s producer ``p`` to run directly in ``o``'s storage (so ``c`` aliases ``o``):
   ``p`` has an in-place form (``executors.torch_inplace``); ``c`` is ``p``'s only result;
   ``p``'s base argument is ``o`` itself or shares no storage with ``o``, and no other argument
   shares storage with ``o``. Then either
   - ``c`` is consumed by nothing but the write: ``p`` moves down to the write, or
   - nothing between ``p`` and the write reads or writes ``o``'s storage, or is among the ops the
     write must follow (its ``after``): the write moves up to ``p`` and readers of ``c`` there read
     ``o``, which already holds ``c``.

A write that a fusion (an nvFuser region) runs inside it is checked with the region as one op: the
ordering check (1) as above, then what nvFuser's alias outputs need (``fused_write_blocker``). A write
that fails it is given back: the region is rebuilt by its executor without it, and the write runs after
it on the PyTorch executor, where (2) decides it like any other.

What cannot be proved stays ``out.copy_(computed)`` (correct, one extra buffer and copy) and is
reported in an ``InplaceDecision``; with ``strict=True`` it raises ``UnprovenInplaceError`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from thunder.core import prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy, Variable, variableify
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, get_source_line
from thunder.core.transform_common import dce
from thunder.executors.passes import del_last_used
from thunder.executors.torchex import ex as torch_ex

from thunder_ext.executors.torch_inplace import BASE_UPDATE_OPS, ELEMENTWISE_OPS, plain_copy_to_out
from thunder_ext.transforms.aliasing import (
    Aliases,
    data_args,
    fused_writes,
    is_copy_to_out,
    is_update_aliases,
    is_view_op,
    tensor_args,
    tensor_outs,
    thunder_inplace_write,
    written_tensors,
)

How = Literal["in place at the write", "in place at the producer", "in place in an nvFuser region", "copy"]

# Prims that compute element i of their result from element i of each tensor argument (thunder's prims
# do not broadcast). Taken from how thunder builds its elementwise prims, so that the set follows thunder;
# should that change, the set shrinks to the last three, which only turns in-place writes into copies.
ELEMENTWISE_PRIM_IDS = frozenset(
    {s.id for s in vars(prims).values() if isinstance(s, Symbol) and "_elementwise_" in s.meta.__qualname__}
    | {PrimIDs.WHERE, PrimIDs.LERP, PrimIDs.CONVERT_ELEMENT_TYPE}
)


class InplaceOrderingError(RuntimeError):
    """A write was scheduled before a reader of the value it overwrites."""


class UnprovenInplaceError(RuntimeError):
    """``strict=True``: a write could not be proved safe to run in place."""


@dataclass(frozen=True)
class InplaceDecision:
    """How one ``copy_to_out_`` runs, and why.

    ``source``: the user's line of the in-place op (of the last one, where a chain of them is one write),
    as ``file:line: code`` (``file:line`` where the code cannot be read); empty where the trace has none (``copy_to_out_`` called in a trace).
    ``nbytes``: the size of ``out``, which running in place saves (a buffer and a copy of it) and a
    copy costs; None where the shape is not a constant.
    """

    write: str
    computed: str
    out: str
    how: How
    reason: str
    source: str = ""
    nbytes: int | None = None

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        size = f", {self.nbytes} bytes" if self.nbytes is not None else ""
        return f"{where}{self.write} = copy_to_out_({self.computed}, out={self.out}): {self.how} ({self.reason}{size})"

    @classmethod
    def of(cls, write: BoundSymbol, how: How, reason: str) -> InplaceDecision:
        """The decision for ``write = copy_to_out_(computed, out=out)``, with its source line and size."""
        (computed, out), result = thunder_inplace_write(write), write.output
        return cls(result.name, computed.name, out.name, how, reason, _source_line(write), _nbytes(out))


def _source_line(bsym: BoundSymbol) -> str:
    where = bsym.source_positions
    if bsym.source_filename is None or where is None or where.lineno is None:
        return ""
    code = get_source_line(bsym.source_filename, where.lineno).strip()  # empty where the file is gone
    return f"{bsym.source_filename}:{where.lineno}" + (f": {code}" if code else "")


def _nbytes(t: TensorProxy) -> int | None:
    numel = t.numel
    return int(numel) * t.dtype.bytes if isinstance(numel, int) else None


def _check_ordering(bsyms: list[BoundSymbol], j: int, write: BoundSymbol, aliases: Aliases) -> None:
    """``write`` is ``bsyms[j]``, or a write that the fusion ``bsyms[j]`` runs."""
    _, out = thunder_inplace_write(write)
    new = {o.name for o in tensor_outs(bsyms[j])}
    for later in bsyms[j + 1 :]:
        args = data_args(later)
        writes = bool(written_tensors(later))
        if is_view_op(later) or is_update_aliases(later) or writes:
            # These name storage rather than read it: derived from the new value, they are new.
            if any(a.name in new for a in args):
                new.update(o.name for o in tensor_outs(later))
            if not writes:
                continue
        if later.sym.id == PrimIDs.RETURN:
            continue  # returning an alias hands over the tensor, it reads nothing
        stale = [a for a in args if a.name not in new and aliases.same_storage(a, out)]
        if stale:
            where = f" in `{bsyms[j].sym.name}`" if bsyms[j] is not write else ""
            raise InplaceOrderingError(
                f"`{later.sym.name}` reads `{stale[0].name}`, which shares storage with `{out.name}`, after "
                f"`{write.output.name} = copy_to_out_(..., out={out.name})`{where} overwrote it"
            )


def _producer_blocker(producer: BoundSymbol, out: TensorProxy, aliases: Aliases) -> str | None:
    """Why ``producer`` cannot compute straight into ``out``'s storage, or None if it can."""
    name = producer.sym.name
    if producer.sym.executor is not torch_ex or name not in BASE_UPDATE_OPS | ELEMENTWISE_OPS:
        return f"`{name}` has no in-place form"
    if len(producer.flat_proxy_outs) != 1:
        return f"`{name}` has several results"
    args = tensor_args(producer)
    if name in BASE_UPDATE_OPS:
        base, others = producer.args[0], args[1:]
        if isinstance(base, TensorProxy) and aliases.may_overlap(base, out) and not aliases.same_tensor(base, out):
            return f"its base `{base.name}` overlaps `{out.name}` without being it"
    else:
        others = [a for a in args if not aliases.same_tensor(a, out)]
    for a in others:
        if aliases.may_overlap(a, out):  # a disjoint slice of the same tensor is read as it was
            return f"its argument `{a.name}` shares storage with `{out.name}`"
    return None


def _touches(bsym: BoundSymbol, out: TensorProxy, aliases: Aliases) -> bool:
    return any(aliases.same_storage(a, out) for a in data_args(bsym))


def _first_overwrite_of_inputs(producer: BoundSymbol, between: list[BoundSymbol], aliases: Aliases) -> BoundSymbol | None:
    """The first op of ``between`` that writes storage ``producer`` reads: ``producer`` cannot move below it.

    Storage, not ``after`` edges, decides: a write fused into its producer keeps no ``after``.
    """
    reads = data_args(producer)
    for b in between:
        if any(aliases.same_storage(written, a) for written in written_tensors(b) for a in reads):
            return b
    return None


def _read_after_overwrite(
    bsyms: list[BoundSymbol], j: int, computed: TensorProxy, out: TensorProxy, aliases: Aliases
) -> BoundSymbol | None:
    """The first reader of ``computed`` that runs after a later write into ``out``'s storage.

    In place at the producer, ``computed`` is ``out``, so that reader would see the later value; no
    ordering edge keeps it above that write, which took ``computed`` for a tensor of its own (found by
    the fuzzer under an adversarial scheduler).
    """
    overwritten = False
    for b in bsyms[j + 1 :]:
        if overwritten and any(a.name == computed.name for a in data_args(b)):
            return b
        overwritten = overwritten or any(aliases.same_storage(w, out) for w in written_tensors(b))
    return None


def _fused(producer: BoundSymbol, out: TensorProxy, result: TensorProxy, write: BoundSymbol) -> BoundSymbol:
    op = (BASE_UPDATE_OPS | ELEMENTWISE_OPS)[producer.sym.name]
    fused = op.bind(*producer.args, **producer.kwargs, out=out, output=result)
    fused.subsymbols = [producer, write]
    fused.header = write.header
    return fused.from_bsym(source_filename=write.source_filename, source_positions=write.source_positions)


def _decide(bsyms: list[BoundSymbol], j: int, aliases: Aliases) -> tuple[InplaceDecision, list[BoundSymbol]]:
    write = bsyms[j]
    (computed, out), result = thunder_inplace_write(write), write.output

    def decision(how: How, reason: str) -> InplaceDecision:
        return InplaceDecision.of(write, how, reason)

    i = next((i for i in range(j) if computed.name in {o.name for o in bsyms[i].flat_proxy_outs}), None)
    if i is None:
        return decision("copy", f"`{computed.name}` is not computed in this trace"), bsyms
    producer = bsyms[i]
    if (blocker := _producer_blocker(producer, out, aliases)) is not None:
        return decision("copy", blocker), bsyms
    consumers = [k for k, b in enumerate(bsyms) if k != i and any(a.name == computed.name for a in b.flat_proxy_args)]
    if consumers == [j] and _first_overwrite_of_inputs(producer, bsyms[i + 1 : j], aliases) is None:
        fused = _fused(producer, out, result, write)
        rest = bsyms[:i] + bsyms[i + 1 : j] + [fused] + bsyms[j + 1 :]
        return decision("in place at the write", f"`{computed.name}` has no other reader"), rest
    if blocker := next((b for b in bsyms[i + 1 : j] if b.sym.id != PrimIDs.RETURN and _touches(b, out, aliases)), None):
        return decision("copy", f"`{blocker.sym.name}` uses `{out.name}` between the producer and the write"), bsyms
    if reader := _read_after_overwrite(bsyms, j, computed, out, aliases):
        return decision("copy", f"`{reader.sym.name}` reads `{computed.name}` after a later write to `{out.name}`"), bsyms
    follows = {a.name for a in write.kwargs.get("after", ())}
    if blocker := next((b for b in bsyms[i + 1 : j] if follows & {o.name for o in b.flat_proxy_outs}), None):
        return decision("copy", f"the write must follow `{blocker.sym.name}`, which runs after the producer"), bsyms
    fused = _fused(producer, out, computed, write)
    swap = {variableify(result): computed}
    later = [b.from_bsym_swap_proxies(swap, skip_output=True) for b in bsyms[j + 1 :]]
    return decision("in place at the producer", f"nothing uses `{out.name}` before the write"), (
        bsyms[:i] + [fused] + bsyms[i + 1 : j] + later
    )


def fused_write_blocker(fusion: BoundSymbol, write: BoundSymbol, aliases: Aliases) -> str | None:
    """Why the region ``fusion`` cannot run ``write = copy_to_out_(c, out=o)``, one of its ops, as an
    nvFuser output aliasing ``o``; None if it can.

    nvFuser writes an alias output into ``o``'s buffer at a point of its own choosing, in whichever
    kernel it schedules, so the region's own order says nothing about when ``o`` is overwritten. Rules:

    1. ``o`` is an input of the region: nvFuser aliases outputs to inputs only.
    2. ``c`` is computed in the region, by an op other than a write. Stock thunder's sharp edge: a
       region that only copies an input into another may run no kernel at all.
    3. ``c`` is not an output of the region, and no other op of the region reads it. Returned, it would
       share ``o``'s storage (stock thunder's other sharp edge, its issue 1109). The second half is
       conservative, as in thunder's own proposal of this primitive: whether nvFuser keeps ``c`` apart
       from ``o``'s buffer for its other readers could not be checked without a GPU.
    4. Every other op of the region that reads or writes ``o``'s storage, through any alias, is an
       elementwise prim that reads ``o`` itself and computes part of ``c`` alone (it is in
       ``c``'s private elementwise cone, ``_elementwise_cone``): it reads element i of ``o`` only to
       compute element i of ``c``, which is what replaces it. Anything else may run in another kernel or
       thread after ``o`` is overwritten.
    """
    computed, out = write.args[0], write.kwargs["out"]
    name, ops = fusion.sym.name, [s for s in fusion.subsymbols if s is not write]
    if out.name not in {a.name for a in fusion.flat_proxy_args}:
        return f"`{out.name}` is computed in `{name}`, and nvFuser aliases outputs to region inputs only"
    producer = next((s for s in ops if computed.name in {o.name for o in s.flat_proxy_outs}), None)
    if producer is None:
        return f"`{computed.name}` is not computed in `{name}`: an aliased copy of a region input may run no kernel"
    if is_copy_to_out(producer):
        return f"`{computed.name}` is the result of another write in `{name}`"
    if computed.name in {o.name for o in fusion.flat_proxy_outs}:
        return f"`{computed.name}` is also an output of `{name}`, which would share `{out.name}`'s storage"
    if reader := next((s for s in ops if computed.name in {a.name for a in data_args(s)}), None):
        return f"`{reader.sym.name}` also reads `{computed.name}` in `{name}`"
    cone = _elementwise_cone(fusion, write)
    for op in ops:
        for a in data_args(op):
            if aliases.same_storage(a, out) and not (any(op is c for c in cone) and aliases.same_tensor(a, out)):
                sharing = "" if a.name == out.name else f" (sharing storage with `{out.name}`)"
                return (
                    f"`{op.sym.name}` uses `{a.name}`{sharing} in `{name}`, "
                    f"and is not an elementwise step towards `{computed.name}` alone"
                )
    return None


def _elementwise_cone(fusion: BoundSymbol, write: BoundSymbol) -> list[BoundSymbol]:
    """The ops of ``fusion`` that compute ``write``'s ``computed`` elementwise at ``out``'s shape, and whose
    results nothing else needs: no op of the region outside the cone, and not the region's outputs."""
    out = write.kwargs["out"]
    outputs = {o.name for o in fusion.flat_proxy_outs}
    users: dict[str, list[BoundSymbol]] = {}
    for op in fusion.subsymbols:
        for a in data_args(op):
            users.setdefault(a.name, []).append(op)
    position = next(i for i, op in enumerate(fusion.subsymbols) if op is write)
    cone: list[BoundSymbol] = []
    # Backwards, so that every user of an op is decided before the op.
    for op in reversed(fusion.subsymbols[:position]):
        results = [o.name for o in op.flat_proxy_outs]
        its_users = [u for r in results for u in users.get(r, ())]
        if (
            op.sym.id in ELEMENTWISE_PRIM_IDS
            and isinstance(op.output, TensorProxy)
            and op.output.shape == out.shape
            and not outputs.intersection(results)
            and its_users
            and all(u is write or any(u is c for c in cone) for u in its_users)
        ):
            cone.append(op)
    return cone


@dataclass(frozen=True)
class _Region:
    """What ``FusionExecutor.fuse`` compiles, in the form thunder's own ``update_fusion_call_ctx`` gives it."""

    inputs: tuple[Variable, ...]
    outputs: tuple[Variable, ...]
    bound_symbols: list[BoundSymbol]


def _fuse_again(fusion: BoundSymbol, bsyms: list[BoundSymbol], outputs: list[Proxy]) -> BoundSymbol | None:
    """``fusion``'s executor fuses anew what of ``bsyms`` computes ``outputs`` (and every write); None if nothing."""
    trace = TraceCtx()
    trace.bound_symbols = [*bsyms, prims.python_return.bind(outputs, output=None)]
    bsyms = [b for b in dce(trace).bound_symbols if b.sym.id != PrimIDs.RETURN]
    if not bsyms:
        return None
    produced = {o.name for b in bsyms for o in b.flat_proxy_outs}
    inputs = {p.name: p for b in bsyms for p in b.flat_proxy_args if p.name not in produced}
    region = _Region(tuple(map(variableify, inputs.values())), tuple(map(variableify, outputs)), bsyms)
    name = fusion.sym.name
    return fusion.sym.executor.fuse(region, int(name[len(name.rstrip("0123456789")) :]))


def _give_back(fusion: BoundSymbol, refused: list[BoundSymbol]) -> list[BoundSymbol]:
    """``fusion`` rebuilt without the writes ``refused``, followed by each of them as the PyTorch executor's copy.

    In the region, readers of a written value read its ``computed`` instead (the same values). The region
    returns what the writes need of it: their ``computed`` and ``out``, and the readers of the old value
    they must follow (``after``), so the ordering edges stay exact (non-tensor readers, which only read
    metadata, are dropped from ``after``).
    """
    written = {variableify(w.output): w.args[0] for w in refused}
    kept = [
        s.from_bsym_swap_proxies(written, skip_output=True) for s in fusion.subsymbols if all(s is not w for w in refused)
    ]
    produced = {o.name for s in kept for o in s.flat_proxy_outs}
    writes, needed = [], {o.name: o for o in fusion.flat_proxy_outs if variableify(o) not in written}
    for w in refused:
        after = tuple(p for p in w.kwargs.get("after", ()) if p.name not in produced or isinstance(p, TensorProxy))
        needed.update((p.name, p) for p in (w.args[0], w.kwargs["out"], *after) if p.name in produced)
        w = w.from_bsym(kwargs={**w.kwargs, "after": after})
        writes.append(plain_copy_to_out.bind(*w.args, **w.kwargs, output=w.output, subsymbols=[w]))
    region = _fuse_again(fusion, kept, list(needed.values()))
    return ([region] if region is not None else []) + writes


def _no_recomputation_across_writes(bsyms: list[BoundSymbol]) -> list[BoundSymbol]:
    """Regions rebuilt so that none recomputes what an earlier region that writes has computed.

    thunder's rematerialization (in nvFuser's fusion pass) lets a region recompute values of an earlier
    one from that one's inputs instead of receiving them. Where the earlier region writes one of those
    inputs, the recomputation reads it overwritten, or runs a write twice. The later region then
    receives those values from the earlier one again, as before rematerialization.
    """
    bsyms = list(bsyms)
    computed_in: dict[str, int] = {}  # value -> index of the region with writes that computes it
    for j, bsym in enumerate(bsyms):
        if not bsym.sym.is_fusion:
            continue
        recomputed = {o.name for s in bsym.subsymbols for o in s.flat_proxy_outs if o.name in computed_in}
        if recomputed:
            kept = [s for s in bsym.subsymbols if not recomputed.intersection(o.name for o in s.flat_proxy_outs)]
            received = {p.name: p for s in kept for p in s.flat_proxy_args if p.name in recomputed}
            received.update((o.name, o) for o in bsym.flat_proxy_outs if o.name in recomputed)
            for k in sorted({computed_in[name] for name in received}):
                source = bsyms[k]
                outputs = {o.name: o for o in source.flat_proxy_outs}
                outputs.update((n, p) for n, p in received.items() if computed_in[n] == k)
                bsyms[k] = _fuse_again(source, source.subsymbols, list(outputs.values()))
            outputs = [o for o in bsym.flat_proxy_outs if o.name not in recomputed]
            bsyms[j] = bsym = _fuse_again(bsym, kept, outputs)
        if bsym is not None and fused_writes(bsym):
            computed_in.update((o.name, j) for s in bsym.subsymbols for o in s.flat_proxy_outs)
    return [b for b in bsyms if b is not None]


def _aliased(fusion: BoundSymbol, write: BoundSymbol) -> InplaceDecision:
    computed, out = write.args[0], write.kwargs["out"]
    return InplaceDecision.of(
        write,
        "in place in an nvFuser region",
        f"`{fusion.sym.name}` computes `{computed.name}` straight into `{out.name}`'s buffer",
    )


def prove_inplace_writes(trace: TraceCtx, *, strict: bool = False) -> tuple[TraceCtx, list[InplaceDecision]]:
    """Run each provably safe ``copy_to_out_`` in place; return the new trace and every decision."""
    bsyms = _no_recomputation_across_writes([b for b in trace.bound_symbols if b.sym.id != PrimIDs.DEL])
    decisions: list[InplaceDecision] = []
    given_back: dict[str, str] = {}  # write result -> why its region gave it back
    j = 0
    while j < len(bsyms):
        if is_copy_to_out(bsyms[j]):
            aliases = Aliases(bsyms)  # anew: an earlier in-place decision made more tensors share storage
            _check_ordering(bsyms, j, bsyms[j], aliases)
            decided, bsyms = _decide(bsyms, j, aliases)
            if why := given_back.get(decided.write):
                decided = replace(decided, reason=f"{decided.reason}; not in nvFuser: {why}")
            if strict and decided.how == "copy":
                raise UnprovenInplaceError(f"cannot prove in-place safe: {decided}")
            decisions.append(decided)
            if decided.how != "copy":
                continue  # the write is gone from index j; what now stands there is unvisited
        elif writes := fused_writes(bsyms[j]):
            aliases = Aliases(bsyms)
            for write in writes:
                _check_ordering(bsyms, j, write, aliases)
            blockers = [(w, why) for w in writes if (why := fused_write_blocker(bsyms[j], w, aliases))]
            if blockers:
                given_back.update((w.output.name, why) for w, why in blockers)
                bsyms[j : j + 1] = _give_back(bsyms[j], [w for w, _ in blockers])
                continue  # what now stands at j (the rebuilt region, or a write given back) is unvisited
            decisions.extend(_aliased(bsyms[j], w) for w in writes)
        j += 1
    if not decisions:
        return trace, decisions
    new_trace = from_trace(trace)
    new_trace.bound_symbols = bsyms
    new_trace = del_last_used(new_trace)
    new_trace.set_provenance(TraceProvenance("thunder_ext: prove copy_to_out_ aliasing safe"))
    return new_trace, decisions
