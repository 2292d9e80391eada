"""The aliasing checker: prove a ``copy_to_out_`` safe to run in place, or leave it a copy.

It runs on the final execution trace, after every pass that may reorder, so what it proves holds
for the order that will run. For each write ``w = copy_to_out_(c, out=o)`` it checks:

0. *No recomputation across a write* (never waived): no fusion region recomputes a value of an earlier
   one across a write, which ``inplace_ex``'s fusion pass rules out before the fusion passes run
   (``transforms/no_recomputation.py``); one that does raises ``InplaceOrderingError``.
1. *Ordering* (never waived): no op after the write reads a tensor sharing ``o``'s storage except
   through ``w`` (or aliases derived from ``w``). A violation means some pass moved the write above
   a reader of the old value; no executor can repair that, so it raises ``InplaceOrderingError``.
2. *Aliasing*, for ``c``'s producer ``p`` to run directly in ``o``'s storage (so ``c`` aliases ``o``):
   ``p`` has an in-place form (``executors.torch_inplace``); ``c`` is ``p``'s only result;
   ``p``'s base argument is ``o`` itself or shares no storage with ``o``, and no other argument
   shares storage with ``o``; a base other than ``o`` is loaded into ``o`` before ``p`` runs, so ``p``
   must not be able to fail at runtime then (an index out of range would leave ``o`` overwritten).
   Then either
   - ``c`` is consumed by nothing but the write: ``p`` moves down to the write, or
   - ``o`` exists before ``p`` runs, and nothing between ``p`` and the write reads or writes ``o``'s
     storage, or is among the ops the write must follow (its ``after``): the write moves up to ``p``
     and readers of ``c`` there read ``o``, which already holds ``c``.

Thunder's own ``copy_`` left in the trace (a write ``functionalize`` rule 5 leaves to thunder, or one
inside an op that thunder's autodiff decomposed, such as ``batch_norm``'s running statistics) is
adopted as a ``copy_to_out_`` and decided as above where it writes no argument that requires grad and
nothing after it reads the storage by an older name (thunder orders its copies by program order alone);
otherwise it stays thunder's, and is reported as a copy. One that thunder's fusion pass took into a
region stays there: it is reported as the region's where the region's rules (below) hold for it as for a
``copy_to_out_``, else as a copy, which the region runs as thunder made it.

A write that a fusion region runs inside it is checked by the rules of the region's executor
(``regions.rules.RegionRules``): the ordering check (1) with the region as one op, or op by op where
the region runs its ops in order (torch.compile), then what the executor needs to run the write itself.
A write that fails it is given back to the PyTorch executor, where (2) decides it like any other.

What cannot be proved stays ``out.copy_(computed)`` (correct, one extra buffer and copy) and is
reported in an ``InplaceDecision``; with ``strict=True`` it raises ``UnprovenInplaceError`` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Literal

from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, tracectx

from thunder_ext.executors.checks import check_dense_argument
from thunder_ext.executors.torch_inplace import inplace_form, plain_copy_to_out, updates_a_base
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.gradients import arguments_requiring_grad, grad_argument_sharing
from thunder_ext.transforms.no_recomputation import recomputations_across_writes
from thunder_ext.transforms.op_kinds import (
    data_args,
    fused_thunder_copies,
    fused_writes,
    is_copy_to_out,
    is_thunder_copy,
    is_update_aliases,
    is_view_op,
    located_at,
    may_fail_at_runtime,
    source_line,
    tensor_args,
    tensor_outs,
    thunder_inplace_write,
    unpacks_an_argument,
    written_tensors,
)
from thunder_ext.transforms.regions.give_back import fusion_number, give_back
from thunder_ext.transforms.regions.rules import RegionOps, rules_for, with_checks_ahead, write_blocker
from thunder_ext.transforms.trace_index import END, TOP, Position, TraceIndex

How = Literal[
    "in place at the write", "in place at the producer", "in place in an nvFuser region", "in a torch.compile region", "copy"
]

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
        return cls(result.name, computed.name, out.name, how, reason, source_line(write), _nbytes(out))


def _nbytes(t: TensorProxy) -> int | None:
    numel = t.numel
    return int(numel) * t.dtype.bytes if isinstance(numel, int) else None


def _in_order(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` is a region that runs its ops in their order (``RegionRules.in_order``)."""
    return bsym.sym.is_fusion and (rules := rules_for(bsym)) is not None and rules.in_order


def _ops_at(index: TraceIndex, positions: list[Position]) -> Iterator[BoundSymbol]:
    """The ops at ``positions``, in order: a region that runs its ops in order by its ops, any other as one op."""
    seen: set[int] = set()
    for slot, k in positions:
        op = index.ops[slot]
        if op is None:
            continue
        if not op.sym.is_fusion:
            yield op
        elif _in_order(op):
            if k != TOP:
                yield op.subsymbols[k]
        elif slot not in seen:
            seen.add(slot)
            yield op


def _check_ordering(index: TraceIndex, j: int, write: BoundSymbol, region: RegionOps | None = None) -> None:
    """``write`` is the op in slot ``j``, or a write that the fusion there runs (``region``, its ops).

    A region counts as one op, or as its ops where it runs them in order: then the ops after the write
    start inside its own region. Only ops that use ``out``'s storage can break the rule, so only they are
    visited.
    """
    _, out = thunder_inplace_write(write)
    op, aliases = index.ops[j], index.aliases
    if region is not None and _in_order(op):
        new, start = {write.output.name}, (j, region.position(write))
    else:
        new, start = {o.name for o in tensor_outs(op)}, (j, END)
    for later in _ops_at(index, index.storage_readers(out, after=start)):
        if later.sym.id == PrimIDs.RETURN:
            continue  # returning an alias hands over the tensor, it reads nothing
        args = data_args(later)
        writes = bool(written_tensors(later))
        if later.sym.is_fusion:
            # run as one op, it reads what it reads before any of its results exist; those that are views
            # of the new value (nvFuser returns a view of an input as such) are new
            for sub in later.subsymbols:
                _follow_new_value(sub, new)
        elif is_view_op(later) or is_update_aliases(later) or writes:
            _follow_new_value(later, new)
            if not writes:
                continue
        stale = [a for a in args if a.name not in new and aliases.same_storage(a, out)]
        if stale:
            where = f" in `{op.sym.name}`" if op is not write else ""
            raise InplaceOrderingError(
                f"`{later.sym.name}` reads `{stale[0].name}`, which shares storage with `{out.name}`, after "
                f"`{write.output.name} = copy_to_out_(..., out={out.name})`{where} overwrote it"
            )


def _follow_new_value(op: BoundSymbol, new: set[str]) -> None:
    """A view, a rename or a write names storage rather than reads it: derived from the new value, its
    results are new."""
    if (is_view_op(op) or is_update_aliases(op) or written_tensors(op)) and any(a.name in new for a in data_args(op)):
        new.update(o.name for o in tensor_outs(op))


def _producer_blocker(producer: BoundSymbol, computed: TensorProxy, out: TensorProxy, aliases: Aliases) -> str | None:
    """Why ``producer`` cannot compute ``computed`` straight into ``out``'s storage, or None if it can."""
    name = producer.sym.name
    if unpacks_an_argument(producer):  # one of several, where it unpacks a sequence
        return f"`{computed.name}` is an argument: no op computes it, and the write is its copy"
    if inplace_form(producer) is None:
        return f"`{name}` has no in-place form"
    if len(producer.flat_proxy_outs) != 1:
        return f"`{name}` has several results"
    args = tensor_args(producer)
    if updates_a_base(producer):
        base, others = producer.args[0], args[1:]
        if isinstance(base, TensorProxy) and aliases.may_overlap(base, out) and not aliases.same_tensor(base, out):
            return f"its base `{base.name}` overlaps `{out.name}` without being it"
        # its base is loaded into `out` first, and an index out of range would then leave `out` overwritten
        if not aliases.same_tensor(base, out) and may_fail_at_runtime(producer):
            return f"`{name}` may fail at runtime (an index out of range) after loading its base `{base.name}` into `{out.name}`"
    else:
        others = [a for a in args if not aliases.same_tensor(a, out)]
    for a in others:
        if aliases.may_overlap(a, out):  # a disjoint slice of the same tensor is read as it was
            return f"its argument `{a.name}` shares storage with `{out.name}`"
    return None


def _touches(bsym: BoundSymbol, out: TensorProxy, aliases: Aliases) -> bool:
    return any(aliases.same_storage(a, out) for a in data_args(bsym))


def _writes_storage_of(bsym: BoundSymbol, t: TensorProxy, aliases: Aliases) -> bool:
    return any(aliases.same_storage(w, t) for w in written_tensors(bsym))


def _first(index: TraceIndex, positions: list[Position], holds: Callable[[BoundSymbol], bool]) -> int | None:
    """The first slot among ``positions`` whose top-level op ``holds``."""
    return next((s for s in index.slots(positions) if holds(index.ops[s])), None)


def _first_overwrite_of_inputs(index: TraceIndex, i: int, j: int) -> int | None:
    """The first slot between the producer's (``i``) and the write's (``j``) that writes storage the producer
    reads: the producer cannot move below it.

    Storage, not ``after`` edges, decides: a write fused into its producer keeps no ``after``.
    """
    reads, aliases = data_args(index.ops[i]), index.aliases
    between = [p for a in reads for p in index.storage_writers(a, after=(i, END), before=(j, TOP))]
    return _first(index, between, lambda b: any(_writes_storage_of(b, a, aliases) for a in reads))


def _read_after_overwrite(index: TraceIndex, j: int, computed: TensorProxy, out: TensorProxy) -> int | None:
    """The first reader of ``computed`` that runs after a later write into ``out``'s storage.

    In place at the producer, ``computed`` is ``out``, so that reader would see the later value; no
    ordering edge keeps it above that write, which took ``computed`` for a tensor of its own (found by
    the fuzzer under an adversarial scheduler).
    """
    aliases = index.aliases
    overwrite = _first(index, index.storage_writers(out, after=(j, END)), lambda b: _writes_storage_of(b, out, aliases))
    if overwrite is None:
        return None
    return next((s for s in index.slots(index.readers(computed, after=(overwrite, END))) if index.reads(s, computed)), None)


def _fused(producer: BoundSymbol, out: TensorProxy, result: TensorProxy, write: BoundSymbol) -> BoundSymbol:
    fused = inplace_form(producer).bind(*producer.args, **producer.kwargs, out=out, output=result)
    fused.subsymbols = [producer, write]
    fused.header = write.header
    return located_at(fused, write)


@dataclass(frozen=True)
class _InPlace:
    """How a write proved safe runs in place: its producer (in slot ``producer``) fused into it, either where the
    write stands (``at_write``) or where the producer stands."""

    producer: int
    at_write: bool


def _decide(index: TraceIndex, j: int) -> tuple[InplaceDecision, _InPlace | None]:
    """Decide the write in slot ``j``, changing nothing: the decision, and how it runs in place if it does."""
    ops, aliases, write = index.ops, index.aliases, index.ops[j]
    computed, out = thunder_inplace_write(write)

    def copy(reason: str) -> tuple[InplaceDecision, None]:
        return InplaceDecision.of(write, "copy", reason), None

    def name_at(slot: int) -> str:
        return ops[slot].sym.name

    i = index.producer(computed)
    if i is None or i > j or ops[i] is None:
        return copy(f"`{computed.name}` is not computed in this trace")
    if (blocker := _producer_blocker(ops[i], computed, out, aliases)) is not None:
        return copy(blocker)
    consumers = [s for s in index.slots(index.readers(computed)) if s != i and index.takes(s, computed)]
    if consumers == [j] and _first_overwrite_of_inputs(index, i, j) is None:
        decided = InplaceDecision.of(write, "in place at the write", f"`{computed.name}` has no other reader")
        return decided, _InPlace(i, at_write=True)
    if (maker := index.producer(out)) is not None and i < maker < j:
        # `r2 = x.clone(); r2.copy_(x)` of a pending x: `out` is made from `computed`, after its producer
        return copy(f"`{name_at(maker)}` makes `{out.name}` after the producer")
    between = index.storage_readers(out, after=(i, END), before=(j, TOP))
    touches = lambda b: b.sym.id != PrimIDs.RETURN and _touches(b, out, aliases)  # noqa: E731
    if (blocker := _first(index, between, touches)) is not None:
        return copy(f"`{name_at(blocker)}` uses `{out.name}` between the producer and the write")
    later_writes = index.storage_writers(computed, after=(j, END))
    if (writer := _first(index, later_writes, lambda b: _writes_storage_of(b, computed, aliases))) is not None:
        # computed into `out`, `computed` would be `out`: its later write would reach `out` too
        return copy(f"`{name_at(writer)}` writes `{computed.name}` later")
    if (reader := _read_after_overwrite(index, j, computed, out)) is not None:
        return copy(f"`{name_at(reader)}` reads `{computed.name}` after a later write to `{out.name}`")
    followed = [s for a in write.kwargs.get("after", ()) if (s := index.producer(a)) is not None and i < s < j]
    if followed:
        return copy(f"the write must follow `{name_at(min(followed))}`, which runs after the producer")
    decided = InplaceDecision.of(write, "in place at the producer", f"nothing uses `{out.name}` before the write")
    return decided, _InPlace(i, at_write=False)


def _run_in_place(index: TraceIndex, j: int, how: _InPlace) -> None:
    """Rewrite ``index`` so that the write in slot ``j`` runs as ``_decide`` proved it may."""
    ops, write, i = index.ops, index.ops[j], how.producer
    (computed, out), result, producer = thunder_inplace_write(write), write.output, ops[i]
    if how.at_write:
        index.remove(i)
        index.replace(j, _fused(producer, out, result, write))
        return
    index.replace(i, _fused(producer, out, computed, write))
    index.remove(j)
    swap = {variableify(result): computed}  # readers of the write's result read `computed`, which is `out` now
    for s in index.slots(index.readers(result, after=(j, END))):
        index.replace(s, ops[s].from_bsym_swap_proxies(swap, skip_output=True))


def _kept_in_region(fusion: BoundSymbol, write: BoundSymbol) -> InplaceDecision:
    rules, (computed, out) = rules_for(fusion), thunder_inplace_write(write)
    reason = rules.kept.format(region=fusion.sym.name, computed=computed.name, out=out.name)
    return InplaceDecision.of(write, rules.how, reason)


def _thunders_copy_stays(
    index: TraceIndex, j: int, copy: BoundSymbol, grad_args: list[TensorProxy], region: RegionOps | None = None
) -> str | None:
    """Why thunder's ``copy`` (the op in slot ``j``, or one that the region there runs: ``region``, its ops) stays
    as thunder made it, or None where the extension can answer for it."""
    _, out = thunder_inplace_write(copy)
    aliases = index.aliases
    if (arg := grad_argument_sharing(out, aliases, grad_args)) is not None:
        return (
            f"thunder differentiates this write into `{out.name}`, which shares storage with `{arg.name}`, an argument "
            "that requires grad: thunder's own copy_ runs it"
        )
    try:
        _check_ordering(index, j, copy, region)
    except InplaceOrderingError as error:
        return f"thunder's own copy_, which a later reader relies on running in program order ({error})"
    if region is not None and (why := write_blocker(region, copy)) is not None:
        return f"thunder's own copy_, which `{region.name}` runs as thunder made it: {why}"
    return None


def _thunder_copy_in_region(
    index: TraceIndex, j: int, copy: BoundSymbol, grad_args: list[TensorProxy], region: RegionOps
) -> InplaceDecision:
    """The region ``region`` (slot ``j``) runs thunder's ``copy`` itself: by its executor's rules where they hold,
    else as a copy."""
    if (why := _thunders_copy_stays(index, j, copy, grad_args, region)) is not None:
        return InplaceDecision.of(copy, "copy", why)
    kept = _kept_in_region(region.fusion, copy)
    return replace(kept, reason=f"thunder's own copy_, which the region's rules allow: {kept.reason}")


def _adopted(copy: BoundSymbol) -> BoundSymbol:
    computed, out = thunder_inplace_write(copy)
    adopted = plain_copy_to_out.bind(computed, out=out, after=(), output=copy.output)
    return located_at(adopted, copy)


def _unless_strict(decided: InplaceDecision, strict: bool) -> InplaceDecision:
    if strict and decided.how == "copy":
        raise UnprovenInplaceError(f"cannot prove in-place safe: {decided}")
    return decided


def prove_inplace_writes(trace: TraceCtx, *, strict: bool = False) -> tuple[TraceCtx, list[InplaceDecision]]:
    """Run each provably safe ``copy_to_out_`` in place; return the new trace and every decision.

    One sweep in program order, since a decision reads the rewrites of the ones before it (a producer fused
    into its write is no longer a reader of what it read; a write a region gives back is decided where it
    lands): a region's writes are checked by its executor's rules and the refused ones given back
    (``_check_region``); each write outside a region is decided (``_decide``, which changes nothing) and run
    as decided (``_run_in_place``)."""
    index = TraceIndex.of_execution_trace(trace)
    if found := recomputations_across_writes(index.ops, index.aliases):
        raise InplaceOrderingError("a fusion region recomputes a value across a write: " + "; ".join(found))
    grad_args = arguments_requiring_grad(trace)
    decisions: list[InplaceDecision] = []
    given_back: dict[str, str] = {}  # write result -> why its region gave it back
    dense: list[BoundSymbol] = []  # the kept writes whose region needs a dense out (``RegionRules.dense_outs``)
    j = 0
    while j < len(index.ops):
        op = index.ops[j]
        if op is None:
            pass  # emptied by a decision
        elif is_thunder_copy(op):
            why = _thunders_copy_stays(index, j, op, grad_args)
            if why is None:
                index.replace(j, _adopted(op))
                continue  # decided as a copy_to_out_ in slot j
            decisions.append(_unless_strict(InplaceDecision.of(op, "copy", why), strict))
        elif is_copy_to_out(op):
            _check_ordering(index, j, op)
            decided, how = _decide(index, j)
            if how is not None:
                _run_in_place(index, j, how)
            if why := given_back.get(decided.write):
                decided = replace(decided, reason=f"{decided.reason}; {why}")
            decisions.append(_unless_strict(decided, strict))
        elif fused_writes(op) or fused_thunder_copies(op):
            index, j, kept = _check_region(trace, index, j, grad_args, given_back)
            if kept is None:
                continue  # what now stands at j (a rebuilt region, or a write given back) is unvisited
            decisions.extend(_unless_strict(d, strict) for d in kept)
            if (rules := rules_for(op)) is not None and rules.dense_outs:
                dense += [*fused_writes(op), *fused_thunder_copies(op)]  # thunder's own copies are alias outputs too
        j += 1
    if not decisions:
        return trace, decisions
    if checks := _dense_argument_checks(trace, index.aliases, dense):
        ops = index.bound_symbols()
        first = next(k for k, b in enumerate(ops) if not b.sym.name.startswith("unpack"))
        index = TraceIndex([*ops[:first], *checks, *ops[first:]])
    return index.rewritten(trace, "thunder_ext: prove copy_to_out_ aliasing safe"), decisions


def _dense_argument_checks(trace: TraceCtx, aliases: Aliases, writes: list[BoundSymbol]) -> list[BoundSymbol]:
    """A ``check_dense_argument`` of each argument that one of ``writes``, kept in a region that needs a dense
    out, overwrites (all of it, or a slice), to run before anything else: the prologue does not see strides."""
    arguments = [a for a in trace.args if isinstance(a, TensorProxy)]
    checks: dict[tuple[str, bool], BoundSymbol] = {}
    for write in writes:
        _, out = thunder_inplace_write(write)
        for a in arguments:
            if aliases.same_storage(a, out) and (a.name, whole := aliases.same_tensor(a, out)) not in checks:
                checks[a.name, whole] = check_dense_argument.bind(a, whole, a.name, source_line(write), output=None)
    return list(checks.values())


def _check_region(
    trace: TraceCtx, index: TraceIndex, j: int, grad_args: list[TensorProxy], given_back: dict[str, str]
) -> tuple[TraceIndex, int, list[InplaceDecision] | None]:
    """The region in slot ``j``, checked by its executor's rules: where a write is refused, the region without it
    (``given_back`` records why) and no decisions yet; else the decisions of its writes and thunder's copies, and
    what its rules run before it placed there. Returns the index (a new one where the ops changed), the slot of
    the region, and the decisions."""
    op = index.ops[j]
    writes, region = fused_writes(op), RegionOps(op, index.aliases)
    for write in writes:
        _check_ordering(index, j, write, region)
    blockers = [(w, why) for w in writes if (why := write_blocker(region, w))]
    if blockers:
        rules = rules_for(op)
        executor = rules.executor if rules is not None else op.sym.name
        given_back.update((w.output.name, f"not in {executor}: {why}") for w, why in blockers)
        index, j = _given_back(index, j, region, [w for w, _ in blockers])
        return index, j, None
    kept = [_kept_in_region(op, w) for w in writes]
    kept += [_thunder_copy_in_region(index, j, copy, grad_args, region) for copy in fused_thunder_copies(op)]
    if rules_for(op) is not None:
        with tracectx(trace):
            placed = with_checks_ahead(region)
        if len(placed) > 1:
            index, j = _replaced(index, j, placed)
    return index, j, kept


def _given_back(index: TraceIndex, j: int, region: RegionOps, refused: list[BoundSymbol]) -> tuple[TraceIndex, int]:
    """The region in slot ``j`` (``region``, its ops) without the writes ``refused``: a new index, and the slot of
    what replaced it."""
    ops = index.ops
    fresh = 1 + max(fusion_number(b) for b in ops if b is not None and b.sym.is_fusion)
    index, _ = _replaced(index, j, give_back(region, refused, fresh))
    return index, j - sum(b is None for b in ops[:j])


def _replaced(index: TraceIndex, j: int, ops: list[BoundSymbol]) -> tuple[TraceIndex, int]:
    """``index`` with ``ops`` in place of its op in slot ``j``: a new index, and the slot of the last of ``ops``.

    The only rewrites that change how many ops there are (a region giving its writes back, checks placed
    before a region), so the index is built anew; they are rare, once per region.
    """
    before, after = [b for b in index.ops[:j] if b], [b for b in index.ops[j + 1 :] if b]
    return TraceIndex([*before, *ops, *after]), len(before) + len(ops) - 1
