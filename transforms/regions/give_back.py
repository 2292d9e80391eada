"""Give a refused write back from its fusion region, by how the region's executor runs it.

A region that runs its ops in order (torch.compile) is split around the write (``take_out``); one that schedules
its ops freely (nvFuser) is rebuilt without it, the write running after it (``rebuild_without``). Either way the
write and what it needs run on the PyTorch executor, where the checker decides them like any other.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from thunder.core import prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy, Variable, variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.core.transform_common import dce

from thunder_ext.executors.torch_inplace import plain_copy_to_out
from thunder_ext.transforms.op_kinds import (
    fused_writes,
    is_copy_to_out,
    is_update_aliases,
    is_view_op,
    located_at,
    may_fail_at_runtime,
    written_tensors,
)
from thunder_ext.transforms.regions.rules import RegionOps, rules_for
from thunder_ext.transforms.traced import on_torch_executor


@dataclass
class _Region:
    """What ``FusionExecutor.fuse`` compiles, in the form thunder's own ``update_fusion_call_ctx`` gives it;
    not frozen, as thunder's ``Region`` is not: ``CUDAGraphTransform.fuse`` assigns its ``bound_symbols``."""

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
    return located_at(claimed, write)


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
    K and V writes would otherwise be a region of its own, per layer and step. Likewise a taken-out op that
    ``_may_move_above`` the runs since the last taken-out ones joins those: HF's V write, after the views of
    the K cache that read the K write, would otherwise cut a region of those views out, compiled apart. A run of
    renames alone (the functionalizer orders an op that may fail after the writes before it by a rename) runs on
    the PyTorch executor: it has no kernel to compile, and a region call costs more than its ops.
    """
    fusion = region.fusion
    ops, outputs = fusion.subsymbols, list(fusion.flat_proxy_outs)
    refused = _with_writes_cut_from_their_producers(region, refused)
    taken: dict[int, list[BoundSymbol]] = {id(w): [_as_torch_write(w)] for w in refused}
    for w in refused:
        producer = region.producer(w.args[0])
        if producer is not None and isinstance(producer.output, TensorProxy) and not is_copy_to_out(producer):
            taken[id(producer)] = on_torch_executor(producer)
    pieces: list[tuple[bool, list[BoundSymbol]]] = []  # (a run of region ops?, its ops)
    last_run, last_taken = -1, -1  # indices in pieces of the latest run, of the latest taken-out ops
    for op in ops:
        if id(op) in taken:
            passed = [b for _, piece in pieces[last_taken + 1 :] for b in piece]
            if last_taken >= 0 and _may_move_above(taken[id(op)], passed):
                pieces[last_taken][1].extend(taken[id(op)])
            else:
                last_taken = len(pieces)
                pieces.append((False, taken[id(op)]))
        elif last_run >= 0 and _may_run_before(op, [b for _, piece in pieces[last_run + 1 :] for b in piece]):
            pieces[last_run][1].append(op)
        else:
            last_run = len(pieces)
            pieces.append((True, [op]))
    split, numbers = [], itertools.count(fresh_number)
    for k, (is_run, piece) in enumerate(pieces):
        if is_run and all(map(is_update_aliases, piece)):
            piece = [b for op in piece for b in on_torch_executor(op)]  # renames alone run no kernel
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


def _may_move_above(moved: list[BoundSymbol], passed: list[BoundSymbol]) -> bool:
    """Whether taken-out ops ``moved`` may run before the region's ops ``passed`` instead of after, with the same
    effects and errors: they read none of their results (functionalization gives a write the readers of the
    old value it overwrites as such results, ``after``), ``passed`` writes nothing that a failure of theirs would
    find unwritten, and not both may fail (which would change whose error eager's order raises)."""
    results = {o.name for b in passed for o in b.flat_proxy_outs}
    if any(results.intersection(p.name for p in b.flat_proxy_args) for b in moved):
        return False
    if any(map(written_tensors, passed)):
        return False
    return not (any(map(may_fail_at_runtime, moved)) and any(map(may_fail_at_runtime, passed)))


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
