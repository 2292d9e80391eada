"""Functionalization of in-place writes: one ``copy_to_out_`` per write, ordered by dataflow.

Rule: every in-place op becomes its functional computation; its target is written once, by
``copy_to_out_(computed, out=target, after=readers)``, emitted at the latest point where the
target's storage is not yet observed.

From that rule follow the guarantees this pass owns (tests/test_guarantees.py checks each):

1. *One write per tensor.* Readers of a written value read ``computed`` itself, so a chain
   ``x.add_(y); z = x * 3; x.mul_(2)`` computes ``t0 = x + y; z = t0 * 3; t1 = t0 * 2`` and writes
   ``x`` once, with ``t1``. The write is emitted only when the storage is observed some other way:
   an op reads an alias of the target (the base of a written view, another view of it), a write
   to another alias of it begins, the trace returns it, or, for an argument's storage, an op that
   may fail at runtime comes (rule 3). ``x.copy_(y)`` computes ``y`` itself: when
   the program still names both storages later, the write lands at once, since deferring it would
   let a later write to ``y`` change what readers of ``x`` see. Names resolve by the tensor they
   denote, so writing ``x`` again never renames ``y``. A write to storage that nothing observes
   afterwards (an intermediate the trace neither reads nor returns) is dead and dropped, also where it
   landed for a view of which nothing reads more than the shape (``_without_unread_writes``).
2. *Readers of the old value run before the write.* ``after`` holds the result of every op that
   read the target's storage since its last write, except those ``computed`` already reads data of.
   It is a dataflow edge: no pass that respects dataflow can move the write above such a reader. An
   op that takes a tensor for its shape alone (``full_like``: thunder decomposes it into a ``full`` of
   constants) is no such dependency, so a reader behind it stays in ``after`` (``op_kinds.decomposed_data_args``).
3. *A failure leaves targets as eager leaves them.* ``after`` also holds the result of every op
   before the in-place op, in program order, that may fail at runtime (``may_fail_at_runtime``:
   an index out of range), so such a failure always comes before the write. And a pending write
   into an argument's storage lands before such an op that follows its in-place op, so the failure
   finds it made (an intermediate's write dies with the call); a chain of in-place ops on an argument
   with such an op between them writes it once before the op and once after. A user's ``assert`` on a
   tensor is such an op (``checked_assert``, ``thunder_ext.thunder026.tensor_asserts``), and every later op that may
   fail reads its integer tensor renamed with the check's result, so that eager's ``AssertionError`` comes
   first, as an index the assert guards would fail after it. An op that indexes as an earlier op of its kind did
   (``how_it_indexes``: the same index tensor, the same bound) fails only where that op fails first, so it is
   no such op: a decode step's value write at the position its key write checked lands with it, not after it.
4. *Readers of the new value run after the write.* They read ``computed`` (which the write
   consumes) or, once the write is emitted, its result; reads through other aliases go through
   an ``update_aliases`` that consumes the write's result: thunder's, or, for an alias thunder
   does not rename (named before the write, read or returned after it), one this pass adds
   (``refresh``). So every write's result is read, which thunder's rematerialization needs of the
   fusion region that runs it.

5. *Thunder differentiates what it did before.* A write traced under ``torch.no_grad()`` or
   ``torch.inference_mode()`` is constant for thunder's VJP, and so is its ``copy_to_out_`` (it carries
   the tag thunder gives such ops, ``DETACHED_AUTOGRAD_GRAPH``). A write that thunder differentiates
   becomes a ``copy_to_out_`` too, whose gradient rule sends the cotangent of the new value to
   ``computed`` (``thunder_ext.primitive``), unless its target shares storage with an argument that
   requires grad: eager rebases such a tensor's autograd history in place, which a traced function
   cannot do for its caller, so that write stays thunder's own op, reported as a copy
   (``gradients.differentiated_writes_left_to_thunder``; the prologue refuses the call before anything
   runs, ``transforms/grad_argument_writes.py``: thunder 0.2.6 loses a non-leaf's old value's gradient).
   A write traced without grad of a value that thunder differentiates (``y = x * 2; with torch.no_grad():
   buf.copy_(y)``) lands at once: its readers read the write's constant result, not ``y``
   (``cuts_the_gradient``), as eager's ``buf`` holds no graph. A
   differentiated write whose new value reads nothing of the old one (``x = a * 2; x.copy_(y)``) reads the old
   value too, with a zero gradient (``traced.keeping_history``), where thunder differentiates that old value
   (``gradients.overwrites_of_differentiated_values``): eager's graph keeps its history behind the write, so
   ``a.grad`` is zeros, not None, and ``x`` requires grad even where ``y`` does not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from thunder.core import dtypes, prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, ProxyTag, TensorProxy, variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx
from thunder.core.transform_common import dce
from thunder.core.utils import ProxyDict

from thunder_ext.executors.torch_inplace import checked_assert
from thunder_ext.primitive import copy_to_out_
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.gradients import (
    cuts_the_gradient,
    grad_storages,
    left_to_thunder,
    overwrites_of_differentiated_values,
    traced_without_grad,
)
from thunder_ext.transforms.op_kinds import (
    decomposed_data_args,
    how_it_indexes,
    is_copy_to_out,
    is_index_like,
    is_update_aliases,
    is_view_op,
    located_at,
    may_fail_at_runtime,
    tensor_args,
    tensor_outs,
    thunder_inplace_write,
)
from thunder_ext.transforms.traced import as_written_into, keeping_history, traced_ops


@dataclass
class _PendingWrite:
    tensor: str  # the written tensor (``Aliases.tensor_key``)
    target: TensorProxy  # its name when the write began: the ``out`` of the write
    computed: TensorProxy
    follows: list[Proxy]  # results of the ops before it that may fail at runtime
    origin: BoundSymbol  # the last in-place op it writes: the write takes its source line
    began: int  # the index in the input trace of the op that began it


@dataclass
class _Storage:
    """What the pass knows of one storage: every tensor ``Aliases`` finds sharing it."""

    last_reference: int = -1  # index of the last op of the input trace that names it
    argument: bool = False  # an argument lives in it: the caller sees it when a call fails (rule 3)
    pending: _PendingWrite | None = None  # its write, not emitted yet
    readers: list[Proxy] = field(default_factory=list)  # results of the ops that read it since its last write
    landed: TensorProxy | None = None  # the result of its latest emitted write


@dataclass
class _Tensor:
    """What the pass knows of one runtime tensor (``Aliases.tensor_key``), whatever names it has."""

    value: Proxy | None = None  # its current value, where a write changed it
    synced: str | None = None  # the landed write of its storage that its current name follows


@dataclass
class _Functionalizer:
    trace: TraceCtx  # the trace being built, which names new proxies
    aliases: Aliases  # over the input trace, whose names denote runtime tensors, and its writes' own ops
    storages: defaultdict[str, _Storage]  # by ``Aliases.storage_key``; new for a tensor the pass makes
    grad_storages: set[str]  # the storages an argument requiring grad lives in (rule 5)
    overwrites: set[int]  # the writes that keep the history of the value they overwrite (rule 5)
    tensors: dict[str, _Tensor] = field(default_factory=lambda: defaultdict(_Tensor))  # by ``Aliases.tensor_key``
    out: list[BoundSymbol] = field(default_factory=list)
    producer: ProxyDict = field(default_factory=ProxyDict)  # of what the pass emitted
    may_fail: list[Proxy] = field(default_factory=list)  # results of ops that may fail at runtime, so far
    last_check: TensorProxy | None = None  # the result of the latest check of a user's assert (``checked_assert``)
    indexed: set[tuple[str, str, int]] = field(default_factory=set)  # how the ops that may fail indexed so far

    def may_fail_first(self, bsym: BoundSymbol) -> bool:
        """Rule 3's ops: those that may fail at runtime, but an op that indexes as an earlier one of its kind (op,
        index, bound: it fails only where that one failed first, and reads its index as renamed for it)."""
        if not may_fail_at_runtime(bsym):
            return False
        return (key := self.indexing_key(bsym)) is None or key not in self.indexed

    def indexing_key(self, bsym: BoundSymbol) -> tuple[str, str, int] | None:
        """``bsym``'s op, the current name of its index and the bound it must stay below; None if it indexes no
        such way (``how_it_indexes``)."""
        how = how_it_indexes(bsym)
        if how is None or how.bound is None or not isinstance(how.index, TensorProxy):
            return None
        return bsym.sym.name, self.resolve(how.index).name, how.bound

    def resolve(self, p: Proxy) -> Proxy:
        """The current value of the tensor that ``p`` names.

        Keyed by tensor, not by value: after ``x.copy_(y)`` the name ``x`` resolves to ``y``, while
        ``y`` stays ``y`` when ``x`` is written again.
        """
        if not isinstance(p, TensorProxy):
            return p
        value = self.tensor(p).value
        return p if value is None else value

    def storage(self, t: TensorProxy) -> _Storage:
        return self.storages[self.aliases.storage_key(t)]

    def tensor(self, t: TensorProxy) -> _Tensor:
        return self.tensors[self.aliases.tensor_key(t)]

    def reads_pending_value(self, t: TensorProxy) -> bool:
        write = self.storage(t).pending
        return write is not None and write.tensor == self.aliases.tensor_key(t)

    def emit(self, bsym: BoundSymbol, *, rename: bool = True) -> None:
        swap = {variableify(p): self.resolve(p) for p in bsym.flat_proxy_args if self.resolve(p) is not p}
        bsym = bsym.from_bsym_swap_proxies(swap, skip_output=True) if swap and rename else bsym
        self.out.append(bsym)
        for o in bsym.flat_proxy_outs:
            self.producer[o] = bsym
        for o in tensor_outs(bsym):  # made now, from names that follow every landed write (refresh)
            if (landed := self.storage(o).landed) is not None:
                self.tensor(o).synced = landed.name
        if self.may_fail_first(bsym):
            self.may_fail.extend(bsym.flat_proxy_outs)
            if (key := self.indexing_key(bsym)) is not None:
                self.indexed.add(key)
        if bsym.sym.id == checked_assert.id:
            self.last_check = bsym.output

    def ancestors(self, p: Proxy) -> set[str]:
        """The names whose data ``p`` is computed from (rule 2)."""
        seen, stack = set(), [p]
        while stack:
            bsym = self.producer.get(stack.pop(), None)
            for a in decomposed_data_args(bsym) if bsym is not None else ():
                if a.name not in seen:
                    seen.add(a.name)
                    stack.append(a)
        return seen

    def flush(self, storage: _Storage) -> TensorProxy:
        write, storage.pending = storage.pending, None
        readers, storage.readers = storage.readers, []
        before = self.ancestors(write.computed) | {write.computed.name}
        after = {r.name: r for r in [*readers, *write.follows] if r.name not in before}
        after = tuple(after.values())
        with tracectx(self.trace):
            result = TensorProxy(like=write.target)
        if traced_without_grad(write.origin):  # rule 5: constant for thunder's VJP, as the op it replaces
            result.tags.add(ProxyTag.DETACHED_AUTOGRAD_GRAPH)
        # The target is named as it was when written: its later names denote the new value.
        bsym = copy_to_out_.bind(write.computed, out=write.target, after=after, output=result)
        self.emit(located_at(bsym, write.origin), rename=False)
        self.tensors[write.tensor].value = result
        self.tensors[write.tensor].synced = result.name
        storage.landed = result
        return result

    def refresh(self, t: TensorProxy) -> None:
        """Rule 4 for an alias whose name predates the latest write to its storage (``v = x.view(-1);
        x.mul_(2); y.copy_(v)``): thunder renames it only before an in-place op on it, so its readers
        would follow the write in program order alone. Renaming it through ``update_aliases`` with the
        write's result, as thunder does, makes them depend on the write."""
        landed, tensor = self.storage(t).landed, self.tensor(t)
        if landed is None or tensor.synced == landed.name:
            return
        renamed, _ = self.traced(lambda: prims.update_aliases((self.resolve(t), landed)))
        tensor.value, tensor.synced = renamed, landed.name

    def land_before_failure(self, bsym: BoundSymbol) -> None:
        """Rule 3, for the writes before an op that may fail at runtime: they land first, into the caller's
        storages, which the caller sees as eager leaves them when the op fails (a pending write into an
        intermediate dies with the call). The op then reads its integer tensor (the index, the divisor)
        renamed together with their results, a dataflow edge that no later pass can reorder, and one
        that carries no gradient: renamed with a tensor that thunder differentiates, a float one would
        give the writes' sources a zero gradient where eager gives none."""
        if not self.may_fail_first(bsym):
            return
        landed = [self.flush(s) for s in self.pending_writes() if s.argument]
        # after a user's assert, as in eager: a later op that may fail, the index it guards, fails there
        ordered = [*landed, *([self.last_check] if self.last_check is not None else [])]
        if ordered:
            # its integer tensor, or the boolean condition of a check (``checked_assert``)
            t = next(a for a in tensor_args(bsym) if is_index_like(a) or dtypes.is_boolean_dtype(a.dtype))
            renamed, *_ = self.traced(lambda: prims.update_aliases((self.resolve(t), *ordered)))
            self.tensor(t).value = renamed

    def pending_writes(self) -> list[_Storage]:
        """The storages with a pending write, in the order their writes began."""
        return sorted((s for s in self.storages.values() if s.pending is not None), key=lambda s: s.pending.began)

    def observe(self, storage: _Storage) -> None:
        """``storage`` is about to be observed: its pending write must land first."""
        if storage.pending is not None:
            self.flush(storage)

    def read(self, bsym: BoundSymbol) -> None:
        """Flush writes whose storage ``bsym`` observes; note it as a reader of the old values.

        Reading a pending value observes no storage, but a view of it does: a view aliases the target's
        storage, so its write lands first and the view is taken of the written tensor, which later
        writes through the view must reach.
        """
        view = is_view_op(bsym)
        observed = []
        for t in tensor_args(bsym):
            if self.reads_pending_value(t) and not view:
                continue
            storage = self.storage(t)
            if all(s is not storage for s in observed):
                observed.append(storage)
        for storage in observed:
            self.observe(storage)
        for t in tensor_args(bsym):
            if not self.reads_pending_value(t):
                self.refresh(t)
        if not view:
            for storage in observed:
                storage.readers.extend(bsym.flat_proxy_outs)

    def write(self, index: int, bsym: BoundSymbol, computed: TensorProxy, target: TensorProxy) -> None:
        for functional_part in bsym.subsymbols[:-1]:
            self.aliases.add(functional_part)  # a view among them (copy_ expands its source) shares its storage
            self.land_before_failure(functional_part)
            self.read(functional_part)
            self.emit(functional_part)
        source, storage, tensor = computed, self.storage(target), self.aliases.tensor_key(target)
        if not self.reads_pending_value(source):  # x.copy_(y) reads y's storage
            self.observe(self.storage(source))
            self.refresh(source)
        computed = self.conform(self.resolve(computed), target)
        if index in self.overwrites:  # rule 5: eager's graph keeps the old value's history behind the write
            computed = self.traced_reading(lambda: keeping_history(computed, target))
        write = storage.pending
        if write is not None and write.tensor == tensor:  # a chain: overwritten before anything observed it
            write.computed, write.follows, write.origin = computed, list(self.may_fail), bsym
        else:
            self.observe(storage)
            self.refresh(target)
            storage.pending = _PendingWrite(tensor, self.resolve(target), computed, list(self.may_fail), bsym, index)
        self.tensors[tensor].value = computed
        both_named_later = min(self.storage(source).last_reference, storage.last_reference) > index
        if both_named_later or cuts_the_gradient(bsym, computed):
            # ``x.copy_(y)`` with both still reachable: deferring would let a later write to ``y`` reach
            # the readers of ``x``; under no_grad, readers of ``computed`` would differentiate through it
            # (rule 5). The write lands now, and a later write to ``y`` waits for it.
            result = self.flush(storage)
            self.storage(source).readers.append(result)

    def conform(self, computed: TensorProxy, target: TensorProxy) -> TensorProxy:
        """``copy_`` broadcasts and converts its source; ``copy_to_out_`` takes it as ``target`` is."""
        return self.traced(lambda: as_written_into(computed, target))

    def traced_reading(self, op: Callable[[], Any]) -> Any:
        """``traced``, each op it records noted as a reader of what it reads (``read``)."""
        result, bsyms = traced_ops(self.trace, op)
        for bsym in bsyms:
            self.read(bsym)
            self.emit(bsym)
        return result

    def traced(self, op: Callable[[], Any]) -> Any:
        """Trace ``op()`` into the trace being built, each op it records emitted as the pass emits any."""
        result, bsyms = traced_ops(self.trace, op)
        for bsym in bsyms:
            self.emit(bsym)
        return result

    def update_aliases(self, bsym: BoundSymbol) -> None:
        ins = tensor_args(bsym)
        if all(map(self.reads_pending_value, ins)):
            # Nothing but pending values: nothing observes the storage, and its results, which name the
            # same tensors, resolve to those values.
            return
        for t in ins:
            self.observe(self.storage(t))
        carried = {self.resolve(t).name for t in ins}
        for t in ins:  # a group that carries the latest write of its storage follows it already
            if (landed := self.storage(t).landed) is None or landed.name not in carried:
                self.refresh(t)
        self.emit(bsym)
        for o in tensor_outs(bsym):
            self.tensor(o).value = o

    def hand_over(self, ret: BoundSymbol) -> None:
        """The trace returns, and its caller observes every storage ``ret`` names (the arguments among them):
        their pending writes land, and ``ret`` names each tensor by its value after them (rule 4), so
        every write's result has a reader. Thunder's rematerialization needs that: it cannot handle a
        fusion region with no output. A pending write to storage ``ret`` does not name is dead (an
        intermediate nothing observes any more) and is dropped."""
        returned = {id(self.storage(t)) for t in tensor_args(ret)}
        for storage in self.pending_writes():
            if id(storage) in returned:
                self.flush(storage)
            else:
                storage.pending = None
        for t in tensor_args(ret):
            self.refresh(t)
        self.emit(ret)

    def left_to_thunder(self, bsym: BoundSymbol, target: TensorProxy) -> bool:
        """Rule 5: a differentiated write into storage of an argument that requires grad stays thunder's op,
        which the loop then treats as any other reader of that storage."""
        return left_to_thunder(bsym, target, self.aliases, self.grad_storages)

    def run(self, bsyms: list[BoundSymbol]) -> list[BoundSymbol]:
        for index, bsym in enumerate(bsyms):
            if bsym.sym.id == PrimIDs.RETURN:
                self.hand_over(bsym)
            elif is_update_aliases(bsym):
                self.update_aliases(bsym)
            elif (write := thunder_inplace_write(bsym)) is not None and not self.left_to_thunder(bsym, write[1]):
                self.write(index, bsym, *write)
            else:
                self.land_before_failure(bsym)
                self.read(bsym)
                self.emit(bsym)
        return self.out


def _storages(trace: TraceCtx, aliases: Aliases) -> defaultdict[str, _Storage]:
    """A record of every storage the trace names, with where it is named last and whether it needs grad."""
    storages: defaultdict[str, _Storage] = defaultdict(_Storage)
    for index, bsym in enumerate(trace.bound_symbols):
        for t in (*tensor_args(bsym), *tensor_outs(bsym)):
            storages[aliases.storage_key(t)].last_reference = index
    for a in trace.args:
        if isinstance(a, TensorProxy):
            storages[aliases.storage_key(a)].argument = True
    return storages


def functionalize_writes(trace: TraceCtx) -> TraceCtx:
    """Rewrite thunder's in-place ops into functional ops and ordered ``copy_to_out_`` writes."""
    if not any(thunder_inplace_write(b) or b.sym.id == checked_assert.id for b in trace.bound_symbols):
        return trace  # nothing to write, nor to order after a check (rule 3)
    trace = dce(trace)
    new_trace = from_trace(trace)
    aliases = Aliases(trace.bound_symbols)
    functionalizer = _Functionalizer(
        new_trace,
        aliases,
        _storages(trace, aliases),
        grad_storages(trace, aliases),
        overwrites_of_differentiated_values(trace, aliases),
    )
    new_trace.bound_symbols = functionalizer.run(trace.bound_symbols)
    new_trace = _without_unread_writes(new_trace)
    new_trace.set_provenance(TraceProvenance("thunder_ext: functionalize writes into copy_to_out_"))
    return new_trace


def _without_unread_writes(trace: TraceCtx) -> TraceCtx:
    """``trace`` without the writes into an intermediate's storage whose data nothing reads afterwards, by any name,
    and that no later write is ordered after: rule 1's dead writes, where one landed for a view of which a later
    op reads the shape only (``x[0:1].mul_(2)`` scattered into ``x``, then ``x.fill_(1)``: ``full_like`` of the
    view). Kept, such a write's result would have no reader, and thunder 0.2.6's split of a differentiated
    trace would put the write into the backward. A later op that names a dropped write's result names its
    target instead: the same shape, and nothing reads its data."""
    bsyms = trace.bound_symbols
    aliases = Aliases(bsyms)
    read = {aliases.storage_key(a) for a in trace.args if isinstance(a, TensorProxy)}  # the caller's storages
    ordered: set[str] = set()  # the results that later writes are ordered after
    dropped: dict[str, BoundSymbol] = {}
    for bsym in reversed(bsyms):
        if is_copy_to_out(bsym):
            if aliases.storage_key(bsym.kwargs["out"]) not in read and bsym.output.name not in ordered:
                dropped[bsym.output.name] = bsym
                continue
            read.add(aliases.storage_key(bsym.args[0]))
            ordered.update(p.name for p in bsym.kwargs.get("after", ()))
        elif not (is_view_op(bsym) or is_update_aliases(bsym)):  # a view or a rename names storage, reads none
            read.update(aliases.storage_key(t) for t in decomposed_data_args(bsym) if isinstance(t, TensorProxy))
    if not dropped:
        return trace
    targets = {variableify(w.output): w.kwargs["out"] for w in dropped.values()}
    gone = {id(w) for w in dropped.values()}
    new_trace = from_trace(trace)
    new_trace.bound_symbols = [b.from_bsym_swap_proxies(targets) for b in bsyms if id(b) not in gone]
    return dce(new_trace)
