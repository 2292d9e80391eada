"""thunder's torch.compile regions: when one may keep a ``copy_to_out_`` it runs.

thunder's torch.compile executor takes each write into the region of the ops around it
(``executors/torch_compile_inplace.py``). A region is compiled from the PyTorch form of its ops, where the write
is ``inplace_ex``'s ``out.copy_(computed)``: Inductor functionalizes that mutation of ``out`` and, for a cache
write (``index_copy``, ``index_put``, setitem, an elementwise update), re-inplaces it, so nothing cache-sized is
allocated (tests/test_torch_compile_regions.py measures it). Which writes may stay in a region is decided on
the final trace by the checker, by ``TORCH_COMPILE_RULES``; the others are given back to the PyTorch executor.
The rules hold for the regions of thunder's three torch.compile executors (a copy of thunder's own that
``torchcompile_cat`` or ``torchcompile_xentropy`` fuses is judged by them).
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.executors.torch_compile import torch_compile_cat_ex, torch_compile_ex, torch_compile_xentropy_ex

from thunder_ext.executors.torch_inplace import CHECKED_WRITES, checked_index, updates_a_base
from thunder_ext.transforms.op_kinds import (
    Indexing,
    data_args,
    how_it_indexes,
    is_copy_to_out,
    is_update_aliases,
    is_view_op,
    located_at,
    may_fail_at_runtime,
    tensor_args,
    tensor_outs,
    thunder_inplace_write,
    written_tensors,
)
from thunder_ext.transforms.regions.rules import RegionOps, RegionRules, elementwise_cone, register_region_rules


def _output_apart_from(region: RegionOps, write: BoundSymbol) -> str | None:
    """An output of the region computed from ``write``'s ``computed`` in a tensor of its own that Inductor may take
    for a no-op of it: anything but a view or a rename of the written value, or the result of another write
    into a region input (the caller's buffer), with the shape and dtype of what it is computed from, at each
    step from the written value (a clone, ``x * 1``, a one-tensor ``cat``; Inductor's no-ops return their
    input, so a step that changes shape or dtype, a matmul, a reduction, makes a buffer of its own). None if
    there is none. Only the ops that read what the written value reaches are visited, in the region's order."""
    aliases, out = region.aliases, thunder_inplace_write(write)[1]
    same = {write.args[0].name, write.output.name}  # the written value, its views and renames
    apart: set[str] = set()
    visited: set[int] = set()
    in_order: list[int] = []  # a heap of positions

    def reached(names) -> None:
        for name in names:
            for user in region.users.get(name, ()):
                if (k := region.position(user)) not in visited:
                    visited.add(k)
                    heapq.heappush(in_order, k)

    reached(same)
    while in_order:
        op = region.ops[heapq.heappop(in_order)]
        read = {a.name for a in data_args(op)}  # a write's `after` only orders it
        if op is write or not read & (same | apart):
            continue
        known = same | apart
        if is_update_aliases(op):  # renames, each output of its input: of the written storage, or apart from it
            for a, o in zip(tensor_args(op), tensor_outs(op)):
                if a.name in apart:
                    apart.add(o.name)
                elif aliases.same_storage(o, out):
                    same.add(o.name)
        elif is_view_op(op) and not read & apart:
            same |= {o.name for o in op.flat_proxy_outs}
        elif not (is_copy_to_out(op) and _writes_an_input(region, op)):
            sources = {(a.shape, a.dtype) for a in data_args(op) if a.name in same | apart}
            apart |= {o.name for o in tensor_outs(op) if (o.shape, o.dtype) in sources}
        reached((same | apart) - known)
    return min(((region.outputs[n], n) for n in apart if n in region.outputs), default=(None, None))[1]


def _writes_an_input(region: RegionOps, write: BoundSymbol) -> bool:
    target, aliases = write.kwargs["out"], region.aliases
    return any(aliases.same_tensor(target, a) for a in region.inputs_sharing.get(aliases.storage_key(target), ()))


def torch_compile_write_blocker(region: RegionOps, write: BoundSymbol) -> str | None:
    """Why the torch.compile region ``region`` cannot run ``write = copy_to_out_(c, out=o)`` itself; None if it can.

    Inductor functionalizes the region (the write becomes a mutation of ``o``, a region input or a view or
    intermediate of the region) and keeps the program's order, re-inplacing the write where it can. Seven
    rules, for the seven cases where that breaks:

    1. ``c`` is computed in the region, by an op other than a write, and is not a region input or a view
       of one. Inductor lowers a copy of an input as that input itself, so a later write to it in the
       region reaches ``o`` too (``y.copy_(x); x.mul_(3)`` leaves ``3 * x`` in ``y``: stock thunder with
       this executor returns that).
    2. No earlier write of the region writes storage ``o`` shares. Inductor, given a region that writes
       a tensor, reads it and writes a view of it, let the read see the second write (found by the
       fuzzer, ``tests/fuzz_regressions/found_c8f8192c8d30.py``; plain torch.compile 2.9.1 does the same).
    3. No op of the region before the write reads ``o``'s storage, but the write's own elementwise steps
       (``elementwise_cone``, as in nvFuser's rule 4) and its own base update (``c = index_copy(o, ...)``,
       ``k.index_copy_`` as thunder traces it: the re-inplaced write is that op) where ``o`` is all of the
       region input it writes, or an intermediate (into a part, ``k[:bs]`` of a larger cache, Inductor
       copies the part into a buffer of its own and back on every call: litgpt's cache write took 12 ms
       at 16384 positions instead of 0.1): Inductor ran ``x.sum()`` and ``x.clone()`` of the region after
       ``x.masked_fill_``'s re-inplaced write (found by the fuzzer, torch 2.9.1, plain torch.compile too).
    4. No other op of the region may fail at runtime (``may_fail_at_runtime``: an index out of range, an
       integer division by zero), unless a check before the region stands for it (``position_checks``).
       Inductor checks an index in the kernel that uses it, element by element, so it may store part of
       a write before it fails, or fail before a write that eager makes first; eager leaves the inputs
       as they were at the failing op (``k.index_copy_(0, tensor([1, 9]), new)`` into a ``k`` of 4: eager
       writes ``k[1]`` and raises, Inductor may write both rows' valid parts or none).
    5. At most one tensor among the region's inputs shares storage with ``o`` (not two arguments of
       other sizes, ``f(x, x[0])``). torch.compile 2.9.1 miscompiles a graph that writes an input that another
       input aliases: plain ``torch.compile`` of ``a.add_(1); return b * 2`` with ``b = a.t()[0]``
       returns ``b * 2`` as if ``a`` had been written twice; a region of ``f(x, x[0])`` returned ``x``
       flattened.
    6. No output of the region is computed from ``c`` in a tensor of its own that Inductor may take for a
       no-op of ``c`` (``_output_apart_from``). Inductor drops a clone (and other no-ops) of a value and
       returns the value's own buffer, which the write makes ``o``'s: a later write of either output reached
       the other (found by the fuzzer, ``tests/fuzz_regressions/found_8a613752dd9d.py``,
       ``found_aaea656a5649.py``). A decode step's logits, computed from the cache by matmuls, are no no-op.
    7. Where ``o``'s storage is a region input's that requires grad (an optimizer's parameter, under ``no_grad``),
       no output of the region is a view of it made before the write (``_view_returned_from_before``).
       torch.compile 2.9.1 refuses such a graph under ``no_grad`` and ``inference_mode`` ("A view was created in
       no_grad mode and its base ... has been modified inplace with grad mode enabled"; plain ``torch.compile``
       of ``v = a.unsqueeze(0); a.copy_(a - 2); return v`` alike, and fine with the view made after the
       write); found by the fuzzer (``requires_grad/found_5df78423d4eb.py``, ``found_b9bc348fbfd9.py``).
    """
    computed, name, aliases = write.args[0], region.name, region.aliases
    producer = region.producer(computed)
    if producer is None or is_copy_to_out(producer):
        return f"`{computed.name}` is not computed in `{name}`, and Inductor would write a region input as it is later"
    if shared := region.inputs_sharing.get(aliases.storage_key(computed)):
        return (
            f"`{computed.name}` is a view of `{shared[0].name}`, an input of `{name}`, "
            "which Inductor would write as it is later"
        )
    out, position = thunder_inplace_write(write)[1], region.position(write)
    storage = aliases.storage_key(out)
    if again := [w.name for k, w in region.storage_writes.get(storage, ()) if k < position]:
        return (
            f"`{name}` already writes `{again[0]}`, which shares storage with `{out.name}`, "
            "and Inductor may let an earlier read of it see this write"
        )
    cone = elementwise_cone(region, write)
    own_update = (
        updates_a_base(producer)
        and aliases.same_tensor(producer.args[0], out)
        and all(a.shape == out.shape for a in region.inputs_sharing.get(storage, ()))
    )
    for op in region.storage_readers.get(storage, ()):
        if region.position(op) >= position:
            break
        if is_update_aliases(op) or is_view_op(op) or id(op) in cone or (own_update and op is producer):
            continue  # a rename or a view names the storage; the cone reads element i to replace it
        shared = next(a.name for a in data_args(op) if aliases.storage_key(a) == storage)
        return (
            f"`{op.sym.name}` reads `{shared}` (the old value of `{out.name}`) in `{name}`, "
            "and Inductor may run it after the write"
        )
    if failing := region.once(_position_checked_ops)[1]:
        return (
            f"`{failing[0].sym.name}` may fail at runtime in `{name}` (an index out of range, an integer division by zero), "
            "no check before the region can stand for it, and Inductor may have written part of the region's writes by then"
        )
    sharing = {aliases.tensor_key(a): a.name for a in region.inputs_sharing.get(storage, ())}
    if len(sharing) > 1:
        first, second, *_ = sharing.values()
        return (
            f"`{first}` and `{second}`, inputs of `{name}`, share storage with `{out.name}`, "
            "and torch.compile miscompiles a write of an input that another input aliases"
        )
    if apart := _output_apart_from(region, write):
        return (
            f"`{name}` returns `{apart}`, computed from `{computed.name}`, "
            "which Inductor may return as the written buffer itself"
        )
    if viewed := _view_returned_from_before(region, write):
        return (
            f"`{name}` returns `{viewed}`, a view of `{out.name}` (of an input that requires grad) made before "
            "the write, and torch.compile refuses a graph that writes such an input under no_grad"
        )
    return None


def _view_returned_from_before(region: RegionOps, write: BoundSymbol) -> str | None:
    """An output of the region that is a view (by any later name) made before ``write`` of the storage it writes,
    where a region input of that storage requires grad; None if there is none."""
    aliases, out = region.aliases, thunder_inplace_write(write)[1]
    storage = aliases.storage_key(out)
    if not any(a.requires_grad for a in region.inputs_sharing.get(storage, ())):
        return None
    before = {
        aliases.tensor_key(v)
        for op in region.ops[: region.position(write)]
        if is_view_op(op) and not is_update_aliases(op)
        for v in tensor_outs(op)
        if aliases.storage_key(v) == storage
    }
    outputs = (o for o in region.fusion.flat_proxy_outs if isinstance(o, TensorProxy))
    return next((o.name for o in outputs if aliases.tensor_key(o) in before), None)


def _checkable(op: BoundSymbol, region: RegionOps) -> Indexing | None:
    """How ``op`` indexes, its index as the region input it names, where a check of that input before the
    region can stand for ``op``'s own: the region takes the index as an input (functionalization may rename
    it, to order the op after writes) and does not write its storage, so that the check sees
    its value; an op that writes (eager checks a position before it writes there) writes at one int64
    position, since eager fails on several midway, having written the others.

    On the CPU only: on a GPU the check would wait for the device at every call and could not be captured
    in a CUDA graph, and eager's own failure there is a device-side assert; none of it can be tried here."""
    indexing = how_it_indexes(op)
    if indexing is None or indexing.tensor.device.type != "cpu" or not all(isinstance(n, int) for n in indexing.tensor.shape):
        return None
    aliases, storage = region.aliases, region.aliases.storage_key(indexing.index)
    index = next((a for a in region.inputs_sharing.get(storage, ()) if aliases.same_tensor(a, indexing.index)), None)
    if index is None or storage in region.storage_writes:
        return None
    if indexing.checked_as in CHECKED_WRITES and not (index.dtype == dtypes.int64 and index.numel == 1):
        return None
    return replace(indexing, index=index)


def _position_checked_ops(region: RegionOps) -> tuple[list[tuple[Indexing, BoundSymbol]], list[BoundSymbol]]:
    """The ops of the region that may fail at runtime, as ``(checked, unchecked)``: ``checked`` are the first op of
    each index and bound that a check before the region can stand for (with how it indexes), in the region's
    order; the others are ``unchecked``.

    A check raises with nothing of the region run, which is eager's state at the failing op only where every
    write of the region comes after that op in program order (``_every_write_follows``). A later op at the
    same index and bound fails only where the first does, so it needs no check of its own (a decode step
    writes and reads every layer's cache at one position).
    """
    checked: dict[tuple[str, int], tuple[Indexing, BoundSymbol]] = {}
    unchecked: list[BoundSymbol] = []
    fusion = region.fusion
    for k, op in enumerate(fusion.subsymbols):
        if not may_fail_at_runtime(op):
            continue
        indexing = _checkable(op, region)
        key = None if indexing is None else (indexing.index.name, indexing.bound)
        if key in checked:
            continue
        if key is not None and _every_write_follows(fusion, k):
            checked[key] = indexing, op
        else:
            unchecked.append(op)
    return list(checked.values()), unchecked


def _every_write_follows(fusion: BoundSymbol, k: int) -> bool:
    """Whether every write of ``fusion`` depends on its ``k``-th op, by its data or its ``after``.

    Functionalization puts into a write's ``after`` every op before it in program order that may fail, so a
    write that does not depend on a failing op may come first in program order (it sinks to where its
    storage is next observed), and eager has made it when the op fails."""
    ops = fusion.subsymbols
    if any(written_tensors(op) for op in ops[:k]):
        return False
    following = {o.name for o in ops[k].flat_proxy_outs}
    for op in ops[k + 1 :]:
        if following.intersection(p.name for p in op.flat_proxy_args):
            following.update(o.name for o in op.flat_proxy_outs)
        elif written_tensors(op):
            return False
    return True


def position_checks(region: RegionOps) -> list[BoundSymbol]:
    """The checks to run before the region, which keeps its writes by rule 4 (``_position_checked_ops``): one
    ``checked_index`` per index and bound, with the user's line of the op it stands for. Call it within a
    trace's context, which names their results."""
    checks = []
    for indexing, op in region.once(_position_checked_ops)[0]:
        specs = tuple((tuple(t.shape), t.dtype) for t in (indexing.tensor, *indexing.others))
        index = indexing.index
        check = checked_index.bind(index, indexing.checked_as, indexing.dim, specs, output=TensorProxy(like=index))
        checks.append(located_at(check, op))
    return checks


TORCH_COMPILE_RULES = RegionRules(
    "torch.compile",
    in_order=True,
    blocker=torch_compile_write_blocker,
    how="in a torch.compile region",
    kept="`{region}` writes `{out}` itself; Inductor re-inplaces the write where it can",
    ahead=position_checks,
)
TORCH_COMPILE_EXECUTORS = (torch_compile_ex, torch_compile_cat_ex, torch_compile_xentropy_ex)  # thunder's three
for _executor in TORCH_COMPILE_EXECUTORS:
    register_region_rules(_executor, TORCH_COMPILE_RULES)
