"""Where each tensor of a list of bound symbols is produced, read and written, kept as a pass rewrites the list.

The checker and buffer reuse ask, for each write, which ops between two points read or write a storage.
Scanning the trace for each write made them quadratic in the number of writes; this index answers from the
names that share the storage (``Aliases.sharing_storage``) and where each name is used, so a write costs
what its own storage is used for.

Positions are ``(slot, k)``: the slot of a top-level op, and ``k`` the place of an op among the ops of the
fusion region in that slot (``TOP`` for the op, or the region, itself). Ops stay in their slots: a pass
replaces the op of a slot or empties it (None), never moves the others. Answers are candidates, a
superset of the true ones: an op that replaced another is indexed anew, and what the old one used stays
listed, so every caller checks the op it is given.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace
from thunder.executors.passes import del_last_used

from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.op_kinds import data_args, written_tensors

Position = tuple[int, int]
TOP = -1
END = sys.maxsize  # (slot, END) is after every op of the slot
BEFORE_ALL: Position = (-1, END)
AFTER_ALL: Position = (END, TOP)


class TraceIndex:
    """The ops of a trace in their slots, one alias analysis over them, and where each name is used."""

    def __init__(self, bsyms: Iterable[BoundSymbol]) -> None:
        self.ops: list[BoundSymbol | None] = list(bsyms)
        self.aliases = Aliases(self.ops)
        # name -> slot of the top-level op that computes it (a region makes its outputs), the first where several
        # do, and not an op that takes it too: what thunder's ``utils.producers`` maps, whose check of every
        # output against every argument is quadratic in a region's size (one write per tensor of an optimizer)
        self._producers: dict[str, int] = {}
        self._reads: dict[str, list[Position]] = {}
        self._writes: dict[str, list[Position]] = {}
        # slot -> names its op takes (``flat_proxy_args``: a write's ``after`` too), and those it reads (``data_args``)
        self._takes: list[frozenset[str]] = [frozenset()] * len(self.ops)
        self._data: list[frozenset[str]] = [frozenset()] * len(self.ops)
        for slot, op in enumerate(self.ops):
            self._index(slot, op)
            for o in op.flat_proxy_outs:
                if o.name not in self._takes[slot]:
                    self._producers.setdefault(o.name, slot)

    def _index(self, slot: int, op: BoundSymbol) -> None:
        self._takes[slot] = frozenset(p.name for p in op.flat_proxy_args)
        self._data[slot] = frozenset(a.name for a in data_args(op))
        ops = [(TOP, op), *enumerate(op.subsymbols)] if op.sym.is_fusion else [(TOP, op)]
        for k, o in ops:
            for p in o.flat_proxy_args:
                self._reads.setdefault(p.name, []).append((slot, k))
            for t in written_tensors(o):
                self._writes.setdefault(t.name, []).append((slot, k))

    def replace(self, slot: int, op: BoundSymbol) -> None:
        """``op`` runs in ``slot`` from now on; it may rename (an output that is a write's destination)."""
        self.ops[slot] = op
        self._index(slot, op)
        self.aliases.add(op)

    def remove(self, slot: int) -> None:
        self.ops[slot] = None

    def takes(self, slot: int, t: TensorProxy) -> bool:
        """Whether the op in ``slot`` takes ``t``, to read it or to be ordered after it."""
        return self.ops[slot] is not None and t.name in self._takes[slot]

    def reads(self, slot: int, t: TensorProxy) -> bool:
        """Whether the op in ``slot`` reads ``t`` (among its ``data_args``; a returned tensor counts)."""
        return self.ops[slot] is not None and t.name in self._data[slot]

    def producer(self, t: TensorProxy) -> int | None:
        """The slot of the top-level op that computes ``t``."""
        return self._producers.get(t.name)

    def readers(self, t: TensorProxy, after: Position = BEFORE_ALL, before: Position = AFTER_ALL) -> list[Position]:
        """Positions strictly between ``after`` and ``before`` of ops that take ``t`` (by name), in order."""
        return _between(self._reads.get(t.name, ()), after, before)

    def storage_readers(self, t: TensorProxy, after: Position = BEFORE_ALL, before: Position = AFTER_ALL) -> list[Position]:
        """As ``readers``, of every tensor that shares storage with ``t``."""
        return _between(self._over_storage(self._reads, t), after, before)

    def storage_writers(self, t: TensorProxy, after: Position = BEFORE_ALL, before: Position = AFTER_ALL) -> list[Position]:
        """Positions of ops that write a tensor sharing storage with ``t``, in order."""
        return _between(self._over_storage(self._writes, t), after, before)

    def storage_producers(self, t: TensorProxy, after: Position = BEFORE_ALL, before: Position = AFTER_ALL) -> list[Position]:
        """Positions of top-level ops that compute a tensor sharing storage with ``t``, in order."""
        made = [self._producers.get(name) for name in self.aliases.sharing_storage(t)]
        return _between([(s, TOP) for s in made if s is not None], after, before)

    def _over_storage(self, used: dict[str, list[Position]], t: TensorProxy) -> list[Position]:
        return [p for name in self.aliases.sharing_storage(t) for p in used.get(name, ())]

    def slots(self, positions: Iterable[Position]) -> list[int]:
        """The slots of ``positions`` that still hold an op, once each, in order."""
        return sorted({s for s, _ in positions if self.ops[s] is not None})

    def bound_symbols(self) -> list[BoundSymbol]:
        return [op for op in self.ops if op is not None]

    @classmethod
    def of_execution_trace(cls, trace: TraceCtx) -> TraceIndex:
        """The index of an execution trace's ops without its ``del``s, which a pass that rewrites the trace puts back
        anew (``rewritten``): a ``del`` names a tensor's last use, which the rewrite may move."""
        return cls(b for b in trace.bound_symbols if b.sym.id != PrimIDs.DEL)

    def rewritten(self, trace: TraceCtx, provenance: str) -> TraceCtx:
        """``trace`` with this index's ops, a ``del`` after each tensor's last use (thunder's ``del_last_used``)."""
        new_trace = from_trace(trace)
        new_trace.bound_symbols = self.bound_symbols()
        new_trace = del_last_used(new_trace)
        new_trace.set_provenance(TraceProvenance(provenance))
        return new_trace


def _between(positions: Iterable[Position], after: Position, before: Position) -> list[Position]:
    return sorted({p for p in positions if after < p < before})
