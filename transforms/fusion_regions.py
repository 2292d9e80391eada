"""Writes inside fusion regions: one protocol, one set of rules per fusion executor.

A fusion executor's pass may take a ``copy_to_out_`` into a region (thunder_ext registers it with
nvFuser and with thunder's torch.compile executor). What a region may then do with the write depends
on how the executor runs the region, so each executor states it as a ``RegionRules``, which its module
under ``executors/`` registers for the executor object (``register_region_rules``); a region is known
by its symbol's executor:

- ``in_order``: whether the region runs its ops in their order. Then the ordering rule of the checker
  applies inside the region as outside it, and a refused write is given back by *taking it out* with its
  producer: the same ops in the same order, those two on the PyTorch executor, the runs between them
  regions of their own. Otherwise (nvFuser schedules a region's ops as it likes) the region is rebuilt
  without the write, which runs after it, and the executor's rules must prove that no op of the region
  sees the write early; a region that returns a view of the written value is split as above instead.
- ``blocker``: why the region cannot run a given write itself, or None.
- ``ahead``: what runs before a region that keeps its writes, so that the blocker may allow them
  (torch.compile checks a KV write's position there, rule 4); the region reads what those ops return.

=============  ========  ============================================================================
executor       in order  a write stays in the region when
=============  ========  ============================================================================
nvFuser        no        ``executors/nvfuser_inplace.py``: four rules for an output aliasing a region input
torch.compile  yes       ``executors/torch_compile_inplace.py``: the region computes ``computed``, writes its
                         storage once, reads its old value only towards ``computed``, no op of it
                         may fail at runtime but where a position checked before it stands for
                         the op, no two of its inputs alias ``out``, and it returns nothing that
                         Inductor may take for a no-op of the written value, only views of it
=============  ========  ============================================================================

A region of an executor with no rules keeps no write: every write in it is given back. The helpers
both executors' rules share are here: ``RegionOps`` (a region's ops, indexed once for all its writes),
``elementwise_cone``.

Before the fusion passes run, rematerialization across writes is ruled out (``transforms/no_recomputation.py``),
and the writes that no region keeps, whatever else it holds, are kept out of them (``transforms/uncomputed_writes.py``):
the rules above judge what the regions then hold.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from thunder.core import prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy, Variable, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.core.transform_common import dce
from thunder.executors.passes import transform_for_execution
from thunder.executors.torchex import ex as torch_ex
from thunder.extend import Executor, FusionExecutor

from thunder_ext.executors.torch_inplace import plain_copy_to_out
from thunder_ext.transforms.aliasing import (
    Aliases,
    data_args,
    fused_writes,
    is_copy_to_out,
    is_elementwise,
    is_update_aliases,
    is_view_op,
    may_fail_at_runtime,
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


_RULES: dict[Executor, RegionRules] = {}


def register_region_rules(executor: FusionExecutor, rules: RegionRules) -> None:
    """Let the regions of ``executor`` keep writes by ``rules``; a region of an executor with none keeps none."""
    _RULES[executor] = rules


def rules_for(fusion: BoundSymbol) -> RegionRules | None:
    """The rules of the executor whose region ``fusion`` is."""
    return _RULES.get(fusion.sym.executor)


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


@dataclass(frozen=True)
class _Region:
    """What ``FusionExecutor.fuse`` compiles, in the form thunder's own ``update_fusion_call_ctx`` gives it."""

    inputs: tuple[Variable, ...]
    outputs: tuple[Variable, ...]
    bound_symbols: list[BoundSymbol]


def fusion_number(fusion: BoundSymbol) -> int:
    """The counter an executor numbered ``fusion`` with (``nvFusion3``, ``TorchCompile3``)."""
    name = fusion.sym.name
    return int(name[len(name.rstrip("0123456789")) :])


def _fuse_again(
    fusion: BoundSymbol, bsyms: list[BoundSymbol], outputs: list[Proxy], number: int | None = None
) -> BoundSymbol | None:
    """``fusion``'s executor fuses anew what of ``bsyms`` computes ``outputs`` (and every write), under
    ``fusion``'s number unless given another; None if nothing."""
    trace = TraceCtx()
    trace.bound_symbols = [*bsyms, prims.python_return.bind(outputs, output=None)]
    bsyms = [b for b in dce(trace).bound_symbols if b.sym.id != PrimIDs.RETURN]
    if not bsyms:
        return None
    produced = {o.name for b in bsyms for o in b.flat_proxy_outs}
    inputs = {p.name: p for b in bsyms for p in b.flat_proxy_args if p.name not in produced}
    region = _Region(tuple(map(variableify, inputs.values())), tuple(map(variableify, outputs)), bsyms)
    return fusion.sym.executor.fuse(region, fusion_number(fusion) if number is None else number)


def _as_torch_write(write: BoundSymbol) -> BoundSymbol:
    """``write`` as the PyTorch executor's ``copy_to_out_`` (a region holds it as its prim, or as that op)."""
    if write.sym is plain_copy_to_out:
        return write
    claimed = plain_copy_to_out.bind(*write.args, **write.kwargs, output=write.output, subsymbols=[write])
    return claimed.from_bsym(source_filename=write.source_filename, source_positions=write.source_positions)


def _needed(produced_by: list[BoundSymbol], users: list[BoundSymbol], outputs: list[Proxy]) -> list[Proxy]:
    """What of the results of ``produced_by`` the ops ``users`` read or ``outputs`` name, in a stable order."""
    produced = {o.name: o for b in produced_by for o in b.flat_proxy_outs}
    wanted = [p for b in users for p in b.flat_proxy_args] + list(outputs)
    return list({p.name: produced[p.name] for p in wanted if p.name in produced}.values())


def take_out(region: RegionOps, refused: list[BoundSymbol], fresh_number: int) -> list[BoundSymbol]:
    """Give ``refused`` back from a region that runs in order, as the same program: its ops in their order,
    the writes and their producers on the PyTorch executor, each run of other ops between them a region
    (numbered from ``fresh_number`` after the first: a trace calls its regions by name).

    A producer leaves with its write where the PyTorch executor has it, so that the checker may still fuse
    the two into one in-place op (``k.index_copy_``, with eager's checks before it writes).

    An op (a write too) that ``_may_run_before`` the taken-out ops since the last run joins that run instead
    of starting one: each region call costs Dynamo's guard checks, and litgpt's ``self.v[:bs]`` between the
    K and V writes would otherwise be a region of its own, per layer and step. A run of renames alone (the
    functionalizer orders an op that may fail after the writes before it by a rename) runs on the PyTorch
    executor: it has no kernel to compile, and a region call costs more than its ops.
    """
    fusion = region.fusion
    ops, outputs = fusion.subsymbols, list(fusion.flat_proxy_outs)
    refused = _with_writes_cut_from_their_producers(region, refused)
    taken: dict[int, list[BoundSymbol]] = {id(w): [_as_torch_write(w)] for w in refused}
    for w in refused:
        producer = region.producer(w.args[0])
        if producer is not None and isinstance(producer.output, TensorProxy) and not is_copy_to_out(producer):
            taken[id(producer)] = _on_torch_executor(producer)
    pieces: list[tuple[bool, list[BoundSymbol]]] = []  # (a run of region ops?, its ops)
    last_run = -1  # index in pieces of the latest run
    for op in ops:
        if id(op) in taken:
            pieces.append((False, taken[id(op)]))
        elif last_run >= 0 and _may_run_before(op, [b for _, piece in pieces[last_run + 1 :] for b in piece]):
            pieces[last_run][1].append(op)
        else:
            last_run = len(pieces)
            pieces.append((True, [op]))
    split, numbers = [], itertools.count(fresh_number)
    for k, (is_run, piece) in enumerate(pieces):
        if is_run and all(map(is_update_aliases, piece)):
            piece = [b for op in piece for b in _on_torch_executor(op)]  # renames alone run no kernel
        elif is_run:
            later = [b for _, rest in pieces[k + 1 :] for b in rest]
            number = fusion_number(fusion) if k == 0 else next(numbers)
            piece = [_fuse_again(fusion, piece, _needed(piece, later, outputs), number)]
        split.extend(b for b in piece if b is not None)
    return split


def _with_writes_cut_from_their_producers(region: RegionOps, refused: list[BoundSymbol]) -> list[BoundSymbol]:
    """``refused`` and each write the region keeps that would run apart from its producer once they leave:
    one that must follow them (it reads a result of theirs, an ``after`` edge among them: a write after an
    op that may fail) while its producer need not, and so would run in the region after theirs. Its producer
    would stay in the region before, and the write alone in its region would copy a value computed in another
    one (rule 1 of torch.compile); it leaves with its producer too, and the PyTorch executor decides it."""
    left = list(refused)
    results = {o.name for w in refused for b in (w, region.producer(w.args[0])) if b is not None for o in b.flat_proxy_outs}
    for write in fused_writes(region.fusion):
        producer = region.producer(write.args[0])
        if any(write is w for w in left) or producer is None or is_copy_to_out(producer):
            continue
        if results.intersection(p.name for p in write.flat_proxy_args) and not results.intersection(
            p.name for p in producer.flat_proxy_args
        ):
            left.append(write)
            results.update(o.name for b in (write, producer) for o in b.flat_proxy_outs)
    return left


def _may_run_before(op: BoundSymbol, passed: list[BoundSymbol]) -> bool:
    """Whether ``op``, an op its region keeps, may run before the taken-out ops ``passed`` instead of after,
    with the same effects and errors: it cannot fail (a failure must find their writes made, as eager
    does), and reads none of their results. Functionalization gives each reader of what they write the
    write's result, so ``op`` reads nothing they change; where ``op`` is a write, the region's rules keep
    them from reading its storage (rule 3: only its own elementwise steps read its old value there) and
    from failing (rule 4)."""
    if not passed:
        return True
    results = {o.name for b in passed for o in b.flat_proxy_outs}
    return not (may_fail_at_runtime(op) or results.intersection(p.name for p in op.flat_proxy_args))


def _names(bsym: BoundSymbol) -> set[str]:
    own = {p.name for p in (*bsym.flat_proxy_args, *bsym.flat_proxy_outs)}
    return own.union(*map(_names, bsym.subsymbols))


def _on_torch_executor(bsym: BoundSymbol) -> list[BoundSymbol]:
    """``bsym``, a thunder op as a region holds it, as thunder's PyTorch executor runs it, under its own
    output name (thunder's processor names what it rewrites anew; the trace around reads the old name)."""
    trace = TraceCtx()
    trace.names.update(_names(bsym))
    trace.bound_symbols = [bsym, prims.python_return.bind(bsym.output, output=None)]
    *executed, ret = transform_for_execution(trace, (torch_ex,)).bound_symbols
    renamed = {variableify(new): old for new, old in zip(tree_flatten(ret.args[0])[0], tree_flatten(bsym.output)[0])}
    return [b.from_bsym_swap_proxies(renamed) for b in executed]


def rebuild_without(fusion: BoundSymbol, refused: list[BoundSymbol]) -> list[BoundSymbol]:
    """Give ``refused`` back from a region that schedules its ops freely: ``fusion`` rebuilt without them,
    followed by each of them on the PyTorch executor.

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
        writes.append(_as_torch_write(w.from_bsym(kwargs={**w.kwargs, "after": after})))
    region = _fuse_again(fusion, kept, list(needed.values()))
    return ([region] if region is not None else []) + writes


def give_back(region: RegionOps, refused: list[BoundSymbol], fresh_number: int) -> list[BoundSymbol]:
    """What runs in place of the region once the writes ``refused`` leave it, by how its executor runs it
    (a region it adds is numbered ``fresh_number``).

    A region that returns a view of a written value is split like one that runs in order: rebuilt
    without the write, it would return a view of ``computed``, which is a buffer of its own where the
    write stays a copy, so a later write through the view would miss ``out`` (found by the fuzzer around
    the stand-in nvFuser's regions, ``tests/fuzz_regressions/fake_nvfuser/``).
    """
    rules, fusion = rules_for(region.fusion), region.fusion
    if (rules is not None and rules.in_order) or _returns_a_view_of_a_write(fusion, refused):
        return take_out(region, refused, fresh_number)
    return rebuild_without(fusion, refused)


def _returns_a_view_of_a_write(fusion: BoundSymbol, writes: list[BoundSymbol]) -> bool:
    written = {w.output.name for w in writes}
    views = set(written)
    for op in fusion.subsymbols:
        if (is_view_op(op) or is_update_aliases(op)) and views.intersection(p.name for p in op.flat_proxy_args):
            views.update(o.name for o in op.flat_proxy_outs)
    return any(o.name in views - written for o in fusion.flat_proxy_outs)
