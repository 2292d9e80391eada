"""The index the checker and buffer reuse ask instead of scanning the trace: its answers hold every op a
scan finds, on final traces of programs with views, chains of writes and aliased arguments (under each
executor set, so ops inside torch.compile regions too), and after the rewrites a decision makes."""

import itertools

import pytest
import thunder
import torch
from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy

import thunder_ext
from thunder_ext.transforms.op_kinds import written_tensors
from thunder_ext.transforms.trace_index import END, TOP, TraceIndex


def kv_write(k, v, pos, new):
    k.index_copy_(2, pos, new)
    v[:, :, pos] = new
    return (k * 2).sum()


def chain_through_views(x):
    x[0].add_(1)
    y = x.view(-1)
    y.mul_(2)
    return x.sum() + y[0]


def optimizer_like(p0, p1, g):
    for p in (p0, p1):
        p.mul_(0.9).add_(g)


def aliased_sizes(a, b):
    a.add_(1)
    b.mul_(2)
    return a * 3


PROGRAMS = {
    "kv_write": (kv_write, lambda: (torch.zeros(1, 2, 8, 4), torch.zeros(1, 2, 8, 4), torch.tensor([3]), torch.randn(1, 2, 1, 4))),
    "chain_through_views": (chain_through_views, lambda: (torch.randn(3, 4),)),
    "optimizer_like": (optimizer_like, lambda: (torch.randn(5), torch.randn(5), torch.randn(5))),
    "aliased_sizes": (aliased_sizes, lambda: (lambda x: (x, x[0]))(torch.randn(3, 4))),
}  # fmt: skip


def final_ops(name):
    fn, make_args = PROGRAMS[name]
    jitted = thunder_ext.jit(fn)
    jitted(*make_args())
    return [b for b in thunder.last_traces(jitted)[-1].bound_symbols if b.sym.id != PrimIDs.DEL]


def ops_and_regions(op):
    return [op, *op.subsymbols] if op.sym.is_fusion else [op]


def scanned(index, t, i, j, uses):
    """Slots strictly between ``i`` and ``j`` whose op (or an op of its region) ``uses`` a tensor sharing ``t``'s storage."""
    same = index.aliases.same_storage
    return [s for s in range(i + 1, j) if any(same(u, t) for o in ops_and_regions(index.ops[s]) for u in uses(o))]


def tensors_of(ops):
    return {t.name: t for op in ops for o in ops_and_regions(op) for t in (*o.flat_proxy_args, *o.flat_proxy_outs)
            if isinstance(t, TensorProxy)}  # fmt: skip


@pytest.mark.parametrize("name", PROGRAMS)
def test_storage_questions_find_every_op_a_scan_finds(name):
    index = TraceIndex(final_ops(name))
    assert any(written_tensors(op) for op in index.ops), "the program writes nothing: nothing to ask"
    reads = lambda o: o.flat_proxy_args  # noqa: E731
    writes = written_tensors
    makes = lambda o: o.flat_proxy_outs if not o.sym.is_fusion else ()  # noqa: E731  (regions: by their outputs)
    for t in tensors_of(index.ops).values():
        for i, j in itertools.combinations(range(-1, len(index.ops) + 1), 2):
            between = {"after": (i, END), "before": (j, TOP)}
            assert set(scanned(index, t, i, j, reads)) <= set(index.slots(index.storage_readers(t, **between)))
            assert set(scanned(index, t, i, j, writes)) <= set(index.slots(index.storage_writers(t, **between)))
            made = [s for s in range(i + 1, j) if any(index.aliases.same_storage(o, t) for o in makes(index.ops[s]))]
            assert set(made) <= set(index.slots(index.storage_producers(t, **between)))


def test_a_replaced_op_is_indexed_anew_and_an_emptied_slot_is_never_answered():
    index = TraceIndex(final_ops("optimizer_like"))
    slot, op = next((s, op) for s, op in enumerate(index.ops) if written_tensors(op))
    written, taken = written_tensors(op)[0], next(a for a in op.flat_proxy_args if isinstance(a, TensorProxy))
    index.remove(slot)
    assert slot not in index.slots(index.storage_writers(written))
    assert not index.takes(slot, taken) and not index.reads(slot, taken)
    index.replace(slot, op)
    assert slot in index.slots(index.storage_writers(written))
    assert index.takes(slot, taken)
