"""Functionalization of in-place writes: one ``copy_to_out_`` per write, ordered by dataflow.

Rule: every in-place op becomes its functional computation; its target is written once, by
``copy_to_out_(computed, out=target, after=readers)``, emitted at the latest point where the
target's storage is not yet observed.

From that rule follow the guarantees this pass owns (tests/test_functionalize.py checks each):

1. *One write per tensor.* Readers of a written value read ``computed`` itself, so a chain
   ``x.add_(y); z = x * 3; x.mul_(2)`` computes ``t0 = x + y; z = t0 * 3; t1 = t0 * 2`` and writes
   ``x`` once, with ``t1``. The write is emitted only when the storage is observed some other way:
   an op reads an alias of the target (the base of a written view, another view of it), a write
   to another alias of it begins, or the trace returns. ``computed`` that is itself backed by
   storage (``x.copy_(y)`` computes ``y``) is written at once: deferring it would let a later write
   to ``y`` change what readers of ``x`` see.
2. *Readers of the old value run before the write.* ``after`` holds the result of every op that
   read the target's storage since its last write, except those ``computed`` already depends on.
   It is a dataflow edge: no pass that respects dataflow can move the write above such a reader.
3. *A failure leaves targets as eager leaves them.* ``after`` also holds the result of every op
   before the in-place op, in program order, that may fail at runtime (``may_fail_at_runtime``:
   an index out of range), so such a failure always comes before the write.
4. *Readers of the new value run after the write.* They read ``computed`` (which the write
   consumes) or, once the write is emitted, its result; reads through other aliases go through
   thunder's ``update_aliases``, which now consumes the write's result.

Traces that need autograd are returned unchanged: ``copy_to_out_`` has no backward rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import thunder.torch as ltorch
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx
from thunder.core.transform_common import dce

from thunder_ext.primitive import copy_to_out_
from thunder_ext.transforms.aliasing import (
    Aliases,
    is_copy_to_out,
    is_update_aliases,
    is_view_op,
    may_fail_at_runtime,
    tensor_args,
    thunder_inplace_write,
)


@dataclass
class _PendingWrite:
    target: TensorProxy
    computed: TensorProxy
    follows: list[Proxy]  # results of the ops before it that may fail at runtime


@dataclass
class _Functionalizer:
    trace: TraceCtx  # the trace being built, which names new proxies
    aliases: Aliases
    inputs: set[str]
    out: list[BoundSymbol] = field(default_factory=list)
    renamed: dict[str, Proxy] = field(default_factory=dict)
    storage_of_result: dict[str, str] = field(default_factory=dict)  # write results -> storage key
    pending: dict[str, _PendingWrite] = field(default_factory=dict)  # storage key -> write
    readers: dict[str, list[Proxy]] = field(default_factory=dict)  # storage key -> reader results
    producer: dict[str, BoundSymbol] = field(default_factory=dict)
    may_fail: list[Proxy] = field(default_factory=list)  # results of ops that may fail at runtime, so far

    def resolve(self, p: Proxy) -> Proxy:
        while p.name in self.renamed:
            p = self.renamed[p.name]
        return p

    def storage(self, t: TensorProxy) -> str:
        return self.storage_of_result.get(t.name) or self.aliases.storage_key(t)

    def pending_write_of(self, computed: TensorProxy) -> str | None:
        """The storage key whose pending write will store ``computed``, if any."""
        for key, write in self.pending.items():
            if write.computed.name == computed.name:
                return key
        return None

    def emit(self, bsym: BoundSymbol, *, rename: bool = True) -> None:
        swap = {variableify(p): self.resolve(p) for p in bsym.flat_proxy_args if self.resolve(p) is not p}
        bsym = bsym.from_bsym_swap_proxies(swap, skip_output=True) if swap and rename else bsym
        self.out.append(bsym)
        for o in bsym.flat_proxy_outs:
            self.producer[o.name] = bsym
        if may_fail_at_runtime(bsym):
            self.may_fail.extend(bsym.flat_proxy_outs)

    def ancestors(self, p: Proxy) -> set[str]:
        seen, stack = set(), [p.name]
        while stack:
            bsym = self.producer.get(stack.pop())
            for a in bsym.flat_proxy_args if bsym is not None else ():
                if a.name not in seen:
                    seen.add(a.name)
                    stack.append(a.name)
        return seen

    def flush(self, key: str) -> TensorProxy:
        write = self.pending.pop(key)
        before = self.ancestors(write.computed) | {write.computed.name}
        after = {r.name: r for r in [*self.readers.pop(key, []), *write.follows] if r.name not in before}
        after = tuple(after.values())
        with tracectx(self.trace):
            result = TensorProxy(like=write.target)
        # The target is named as it was when written: later names of it denote the new value.
        self.emit(copy_to_out_.bind(write.computed, out=write.target, after=after, output=result), rename=False)
        self.storage_of_result[result.name] = key
        return result

    def observe(self, key: str) -> None:
        """The storage ``key`` is about to be observed: its pending write must land first."""
        if key in self.pending:
            computed = self.pending[key].computed
            self.renamed[computed.name] = self.flush(key)

    def read(self, bsym: BoundSymbol) -> None:
        """Flush writes whose storage ``bsym`` observes; note it as a reader of the old values.

        Reading a pending value observes no storage, but a view of it does: a view aliases the target's
        storage, so its write lands first and the view is taken of the written tensor, which later
        writes through the view must reach.
        """
        view = is_view_op(bsym)
        keys = []
        for t in map(self.resolve, tensor_args(bsym)):
            key = self.pending_write_of(t)
            if key is None:
                key = self.storage(t)
            elif not view:
                continue
            if key not in keys:
                keys.append(key)
        for key in keys:
            self.observe(key)
        if not view:
            for key in keys:
                self.readers.setdefault(key, []).extend(bsym.flat_proxy_outs)

    def write(self, bsym: BoundSymbol, computed: TensorProxy, target: TensorProxy) -> None:
        for functional_part in bsym.subsymbols[:-1]:
            self.read(functional_part)
            self.emit(functional_part)
        computed, target = self.resolve(computed), self.resolve(target)
        computed = self.conform(computed, target)
        key = self.pending_write_of(target)
        if key is not None:  # a chain: the pending value is overwritten before anything observed it
            self.pending[key].computed = computed
            self.pending[key].follows = list(self.may_fail)
        else:
            key = self.storage(target)
            self.observe(key)
            self.pending[key] = _PendingWrite(target, computed, list(self.may_fail))
        new_value = self.flush(key) if self._is_storage_backed(computed) else computed
        # Later reads of the target by its old name (only a direct copy_to_out_ leaves any) see the new value.
        for o in [*bsym.flat_proxy_outs, target]:
            self.renamed[o.name] = new_value

    def conform(self, computed: TensorProxy, target: TensorProxy) -> TensorProxy:
        """``copy_`` broadcasts and converts its source; ``copy_to_out_`` takes it as ``target`` is."""
        if (computed.shape, computed.dtype, computed.device) == (target.shape, target.dtype, target.device):
            return computed
        self.trace.push_scope([])
        with tracectx(self.trace):
            value = ltorch.expand(computed, target.shape)
            value = ltorch.to(value, device=target.device, dtype=target.dtype)
        for bsym in self.trace.pop_scope():
            self.emit(bsym)
        return value

    def _is_storage_backed(self, t: TensorProxy) -> bool:
        bsym = self.producer.get(t.name)
        return (
            bsym is None
            or t.name in self.inputs
            or any(f(bsym) for f in (is_view_op, is_update_aliases, is_copy_to_out))
        )

    def update_aliases(self, bsym: BoundSymbol) -> None:
        ins = [self.resolve(t) for t in tensor_args(bsym)]
        if all(self.pending_write_of(t) is not None for t in ins):
            # Nothing but the pending values themselves: a rename, nothing observes the storage.
            for before, after in zip(ins, bsym.flat_proxy_outs):
                self.renamed[after.name] = before
            return
        for t in ins:
            self.observe(self.pending_write_of(t) or self.storage(t))
        self.emit(bsym)

    def run(self, bsyms: list[BoundSymbol]) -> list[BoundSymbol]:
        for bsym in bsyms:
            if bsym.sym.id == PrimIDs.RETURN:
                for key in list(self.pending):
                    self.observe(key)
                self.emit(bsym)
            elif is_update_aliases(bsym):
                self.update_aliases(bsym)
            elif (write := thunder_inplace_write(bsym)) is not None:
                self.write(bsym, *write)
            else:
                self.read(bsym)
                self.emit(bsym)
        return self.out


def _needs_autograd(trace: TraceCtx) -> bool:
    return any(isinstance(a, TensorProxy) and a.requires_grad for a in trace.args)


def functionalize_writes(trace: TraceCtx) -> TraceCtx:
    """Rewrite thunder's in-place ops into functional ops and ordered ``copy_to_out_`` writes."""
    if _needs_autograd(trace) or not any(thunder_inplace_write(b) for b in trace.bound_symbols):
        return trace
    trace = dce(trace)
    new_trace = from_trace(trace)
    inputs = {p.name for p in tree_flatten((trace.args, trace.kwargs))[0] if isinstance(p, Proxy)}
    functionalizer = _Functionalizer(new_trace, Aliases(trace.bound_symbols), inputs)
    new_trace.bound_symbols = functionalizer.run(trace.bound_symbols)
    new_trace.set_provenance(TraceProvenance("thunder_ext: functionalize writes into copy_to_out_"))
    return new_trace
