"""The KV-cache write idioms of ``benchmarks/kv_idioms.py`` under ``thunder_ext.jit``, against eager.

Each idiom, under each executor set (tests/conftest.py): outputs and caches match eager, the caches keep
their storage, every write runs in place, and no call allocates anything cache-sized.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils._pytree import tree_flatten

import thunder_ext
from thunder_ext.benchmarks.kv_idioms import IDIOMS, report, setup
from thunder_ext.benchmarks.measure import RUNNERS, Allocations, allocations

SIZE = 64


class Jitted:
    """An idiom compiled once per executor set and shared by the tests; it counts its calls, so that eager
    can be stepped as often (a test may run after another has called it)."""

    def __init__(self, idiom: str):
        self.setup = setup(idiom, SIZE)
        self.fn = thunder_ext.jit(self.setup.fn)  # thunder's default executors: the executor set's
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.fn(*self.setup.args)


@functools.cache
def jitted(executor_set: str, idiom: str) -> Jitted:
    return Jitted(idiom)


def tensors(result) -> list[torch.Tensor]:
    return [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("idiom", IDIOMS)
def test_values_and_caches_match_eager_and_keep_their_storage(executor_set, idiom):
    j, eager = jitted(executor_set, idiom), setup(idiom, SIZE)
    storage = [c.data_ptr() for c in j.setup.caches]
    got = tensors(j())
    for _ in range(j.calls):
        want = tensors(eager.fn(*eager.args))
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
    for i, (a, b) in enumerate(zip(j.setup.caches, eager.caches)):
        assert torch.equal(a, b), f"cache {i} differs from eager"
    assert [c.data_ptr() for c in j.setup.caches] == storage, "a cache moved to new storage"


@pytest.mark.parametrize("idiom", IDIOMS)
def test_every_write_in_place_with_no_cache_sized_allocation(executor_set, idiom):
    j = jitted(executor_set, idiom)
    j()
    decisions = thunder_ext.inplace_decisions(j.fn)
    copies = [d for d in decisions if d.how == "copy"]
    assert not copies, copies
    largest = allocations(j, torch.device("cpu")).largest
    # nothing of the size of a written tensor, which may be a slice of a cache (litgpt's `k[:bs]`)
    written = min(d.nbytes for d in decisions)
    assert largest < min(written, *(c.nbytes for c in j.setup.caches)), f"a call allocated {largest:,} bytes"


def _results(time_at_large: float, largest: int) -> dict:
    alloc = {r: Allocations(largest, largest, largest) for r in RUNNERS}
    by_size = {256: ({r: 1e-5 for r in RUNNERS}, alloc), 16384: ({r: time_at_large for r in RUNNERS}, alloc)}
    return {"gpt_fast_setitem": by_size, "tensor_scatter_packed": by_size}


@pytest.mark.executor_sets("defaults")  # compiles nothing
@pytest.mark.parametrize(
    "time_at_large, largest, met", [(1.1e-5, 64, [True, True]), (1.3e-5, 64, [False, True]), (1e-5, 2**25, [True, False])]
)
def test_benchmark_targets_follow_the_measurements(time_at_large, largest, met):
    table = report(_results(time_at_large, largest))
    assert [t.met for t in table.targets] == met
    assert len(table.rows) == 4 and table.rows[-1][:2] == ["tensor_scatter_packed", "16384"]
