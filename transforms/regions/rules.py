"""``RegionRules``, the protocol of what a fusion executor's regions may do with a write, and ``RegionOps``, the
index of one region's ops that every executor's rules read (the package's docstring says more)."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from thunder.core.proxies import Proxy, TensorProxy, variableify
from thunder.core.symbol import BoundSymbol
from thunder.extend import Executor, FusionExecutor

from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.op_kinds import (
    data_args,
    is_elementwise,
    tensor_args,
    thunder_inplace_write,
    written_tensors,
)

T = TypeVar("T")


class RegionOps:
    """One fusion region's ops, indexed once for the rules of all its writes, so that a write's rules cost
    what its own values and storage are used for, not the region's size (an optimizer step is one region
    with a write per tensor). ``aliases`` relates the whole trace's tensors."""

    def __init__(self, fusion: BoundSymbol, aliases: Aliases) -> None:
        self.fusion, self.aliases, self.name = fusion, aliases, fusion.sym.name
        self.ops: list[BoundSymbol] = fusion.subsymbols
        self.inputs: list[TensorProxy] = tensor_args(fusion)
        self.outputs: dict[str, int] = {}  # name -> its first place among the region's outputs
        for k, o in enumerate(fusion.flat_proxy_outs):
            self.outputs.setdefault(o.name, k)
        self._position = {id(op): k for k, op in enumerate(self.ops)}
        self._producer: dict[str, BoundSymbol] = {}
        self.users: dict[str, list[BoundSymbol]] = {}  # value -> the ops that read its data, in order
        self.storage_readers: dict[str, list[BoundSymbol]] = {}  # storage key -> the ops that read its data, in order
        self.storage_writes: dict[str, list[tuple[int, TensorProxy]]] = {}  # storage key -> (position, tensor written)
        for k, op in enumerate(self.ops):
            for o in op.flat_proxy_outs:
                self._producer.setdefault(o.name, op)
            for a in data_args(op):
                self.users.setdefault(a.name, []).append(op)
                readers = self.storage_readers.setdefault(aliases.storage_key(a), [])
                if not readers or readers[-1] is not op:
                    readers.append(op)
            for w in written_tensors(op):
                self.storage_writes.setdefault(aliases.storage_key(w), []).append((k, w))
        self.inputs_sharing: dict[str, list[TensorProxy]] = {}  # storage key -> the region's inputs of that storage
        for a in self.inputs:
            self.inputs_sharing.setdefault(aliases.storage_key(a), []).append(a)
        self._analyses: dict[Callable, object] = {}

    def position(self, op: BoundSymbol) -> int:
        """Where ``op``, one of the region's ops, stands among them (by identity: equal ops may repeat)."""
        return self._position[id(op)]

    def producer(self, t: Proxy) -> BoundSymbol | None:
        """The op of the region that computes ``t``; None for a region input."""
        return self._producer.get(t.name)

    def once(self, analysis: Callable[[RegionOps], T]) -> T:
        """``analysis(self)``, computed at its first call only: what an executor's rules share among the writes
        of one region."""
        if analysis not in self._analyses:
            self._analyses[analysis] = analysis(self)
        return self._analyses[analysis]


Blocker = Callable[[RegionOps, BoundSymbol], "str | None"]


@dataclass(frozen=True)
class RegionRules:
    """What the regions of one fusion executor may do with a ``copy_to_out_`` they run."""

    executor: str  # as decisions name it: "nvFuser", "torch.compile"
    in_order: bool  # does a region run its ops in their order?
    blocker: Blocker  # why the region cannot run this write itself; None if it can
    how: str  # the decision for a write the region keeps
    kept: str  # and its reason, of {region}, {computed} and {out}
    # what runs before a region that keeps its writes, each op a rename of a region input, which the region
    # then reads (called within the trace's context, which names their results)
    ahead: Callable[[RegionOps], list[BoundSymbol]] = lambda region: []
    # whether a region aliases what its ops' prims alias, not what thunder's semantics says (nvFuser:
    # transforms/aliasing_as_traced.py)
    aliases_by_prims: bool = False
    # whether a region writes an alias output right only into a dense tensor (nvFuser): an argument that a kept
    # write overwrites is checked when the call starts (prove_inplace, ``check_dense_argument``)
    dense_outs: bool = False


_RULES: dict[Executor, RegionRules] = {}


def register_region_rules(executor: FusionExecutor, rules: RegionRules) -> None:
    """Let the regions of ``executor`` keep writes by ``rules``; a region of an executor with none keeps none."""
    _RULES[executor] = rules


def rules_for(fusion: BoundSymbol) -> RegionRules | None:
    """The rules of the executor whose region ``fusion`` is."""
    return _RULES.get(fusion.sym.executor)


def aliases_by_prims(executor: Executor) -> bool:
    """Whether ``executor``'s regions alias what their ops' prims alias (``RegionRules.aliases_by_prims``)."""
    return (rules := _RULES.get(executor)) is not None and rules.aliases_by_prims


def elementwise_cone(region: RegionOps, write: BoundSymbol) -> set[int]:
    """The ops of ``region`` (by ``id``) that compute ``write``'s ``computed`` elementwise (prims, or ops of prims) at
    ``out``'s shape, and whose results nothing else needs: no op of the region outside the cone, and not the
    region's outputs. Other readers of ``computed`` itself do not count: they read the new value, which is what
    the write leaves in ``out`` (an optimizer's ``exp_avg.lerp_(...)``, then ``param.addcdiv_(exp_avg, ...)``;
    what they may return is torch.compile's rule 6).

    Only what the write reads, and what the cone reads, can join the cone: those producers are decided latest
    first, so that every user of an op is decided before it."""
    computed, out = thunder_inplace_write(write)
    position = region.position(write)
    cone: set[int] = set()
    offered: set[int] = set()
    latest_first: list[int] = []  # a heap of negated positions

    def offer_producers_of(op: BoundSymbol) -> None:
        for a in data_args(op):
            producer = region.producer(a)
            if producer is not None and (k := region.position(producer)) < position and k not in offered:
                offered.add(k)
                heapq.heappush(latest_first, -k)

    offer_producers_of(write)
    while latest_first:
        op = region.ops[-heapq.heappop(latest_first)]
        results = [o.name for o in op.flat_proxy_outs]
        its_users = [u for r in results for u in region.users.get(r, ()) if r != computed.name or u is write]
        if (
            is_elementwise(op)
            and isinstance(op.output, TensorProxy)
            and op.output.shape == out.shape
            and not any(r in region.outputs for r in results)
            and its_users
            and all(u is write or id(u) in cone for u in its_users)
        ):
            cone.add(id(op))
            offer_producers_of(op)
    return cone


def write_blocker(region: RegionOps, write: BoundSymbol) -> str | None:
    """Why ``region`` cannot run ``write`` itself, by its executor's rules; None if it can."""
    if (rules := rules_for(region.fusion)) is None:
        return f"thunder_ext has no rules for writes in `{region.name}`'s executor"
    return rules.blocker(region, write)


def with_checks_ahead(region: RegionOps) -> list[BoundSymbol]:
    """The region, which keeps its writes, after what its executor's rules run before it (``RegionRules.ahead``),
    reading their results: dataflow keeps them first, whatever a later pass reorders."""
    ahead, fusion = rules_for(region.fusion).ahead(region), region.fusion
    renamed = {variableify(check.args[0]): check.output for check in ahead}
    return [*ahead, fusion.from_bsym_swap_proxies(renamed, skip_output=True)] if ahead else [fusion]
