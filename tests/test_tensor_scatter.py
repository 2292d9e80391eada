"""``thunder_ext.tensor_scatter_`` against a reference written from ONNX TensorScatter-24's definition.

The reference loops over sequences and tokens and writes one slice at a time; the code under test writes
with one ``index_put_``. Each case runs in eager and under ``thunder_ext.jit``, and must write in place:
the cache keeps its storage, and the jit runs every write in place (no copy). Bad input: the
``scatter-*`` cases of ``tests/test_bad_input.py`` (under the jit, against eager) and, here, in eager.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import thunder
import torch

import thunder_ext
from helpers import assert_matches_eager, functionalized_trace, writes_in


def reference(cache, update, write_indices, axis, mode, cu_seqlens=None):
    """ONNX TensorScatter-24 (and the packed form) one token at a time, on a copy of ``cache``."""
    out = cache.clone()
    size, batch = cache.shape[axis], cache.shape[0]
    starts = [0] * batch if write_indices is None else write_indices.tolist()
    by_position = out.movedim(axis, 1)  # (B, S, ...): a view, so writes land in `out`
    if cu_seqlens is None:
        bounds = [(b * update.shape[axis], (b + 1) * update.shape[axis]) for b in range(batch)]
        tokens = update.movedim(axis, 1).flatten(0, 1)  # (B * n, ...), sequence-major
    else:
        bounds, tokens = list(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())), update
    for b, (first, end) in enumerate(bounds):
        for t in range(first, end):
            position = starts[b] + t - first
            if mode == "circular":
                position %= size
            assert 0 <= position < size, "the reference is only called with valid input"
            by_position[b, position] = tokens[t]
    return out


def scatter(cache, update, write_indices, cu_seqlens, axis, mode):
    return thunder_ext.tensor_scatter_(cache, update, write_indices, axis=axis, mode=mode, cu_seqlens=cu_seqlens)


@dataclass
class Case:
    id: str
    cache: tuple[int, ...]
    update: tuple[int, ...]
    write_indices: list[int] | None
    axis: int = -2
    mode: str = "linear"
    cu_seqlens: list[int] | None = None
    index_dtype: torch.dtype = torch.int64

    def args(self):
        g = torch.Generator().manual_seed(0)
        idx = None if self.write_indices is None else torch.tensor(self.write_indices, dtype=self.index_dtype)
        cu = None if self.cu_seqlens is None else torch.tensor(self.cu_seqlens)
        return [torch.randn(self.cache, generator=g), torch.randn(self.update, generator=g), idx, cu]


CASES = [
    Case("4d-linear-per-sequence", (3, 2, 8, 4), (3, 2, 2, 4), [0, 5, 3]),
    Case("4d-linear-no-indices", (2, 2, 8, 4), (2, 2, 3, 4), None),
    Case("4d-linear-fills-the-cache", (2, 2, 4, 3), (2, 2, 4, 3), [0, 0]),
    Case("4d-circular-wraps", (3, 2, 8, 4), (3, 2, 3, 4), [6, 7, 2], mode="circular"),
    Case("4d-circular-index-past-s", (2, 2, 8, 4), (2, 2, 2, 4), [9, 17], mode="circular"),
    Case("4d-axis-last", (2, 3, 4, 8), (2, 3, 4, 2), [6, 1], axis=-1, mode="circular"),
    Case("4d-axis-1", (2, 8, 3, 4), (2, 1, 3, 4), [7, 0], axis=1),
    Case("3d-axis-1", (3, 8, 5), (3, 2, 5), [1, 6, 0], axis=1),
    Case("3d-int32-indices", (2, 6, 5), (2, 1, 5), [5, 2], axis=1, index_dtype=torch.int32),
    Case("4d-packed-linear", (3, 2, 8, 4), (6, 2, 4), [0, 5, 2], cu_seqlens=[0, 1, 4, 6]),
    Case("4d-packed-circular", (2, 2, 8, 4), (7, 2, 4), [6, 3], mode="circular", cu_seqlens=[0, 4, 7]),
    Case("4d-packed-empty-sequence", (3, 2, 8, 4), (3, 2, 4), [1, 8, 4], cu_seqlens=[0, 2, 2, 3]),
    Case("3d-packed-axis-1", (2, 8, 5), (5, 5), [3, 0], axis=1, cu_seqlens=[0, 2, 5]),
    Case("4d-packed-axis-1", (2, 8, 3, 4), (3, 3, 4), None, axis=1, cu_seqlens=[0, 1, 3]),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_eager_matches_the_reference_in_place(case: Case):
    cache, update, idx, cu = case.args()
    expected = reference(cache, update, idx, case.axis, case.mode, cu)
    storage = cache.data_ptr()
    result = scatter(cache, update, idx, cu, case.axis, case.mode)
    assert result is cache and cache.data_ptr() == storage
    assert torch.equal(cache, expected)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_jit_matches_the_reference_in_place(case: Case):
    cache, update, idx, cu = case.args()
    expected = reference(cache, update, idx, case.axis, case.mode, cu)
    storage = cache.data_ptr()
    jfn = thunder_ext.jit(scatter)
    result = jfn(cache, update, idx, cu, case.axis, case.mode)
    assert torch.equal(cache, expected) and torch.equal(result, expected)
    assert cache.data_ptr() == storage and result.data_ptr() == storage
    decisions = thunder_ext.inplace_decisions(jfn)
    assert len(decisions) == 1 and decisions[0].how != "copy", decisions


def test_under_the_jit_it_is_one_symbol_and_one_write():
    case = CASES[0]
    jfn = thunder_ext.jit(scatter)
    jfn(*case.args(), case.axis, case.mode)
    traced = [b.sym.id for b in thunder.last_traces(jfn)[0].bound_symbols]
    assert traced.count("thunder_ext.tensor_scatter_") == 1, traced
    assert len(writes_in(functionalized_trace(jfn))) == 1


def read_around_two_writes(k, new, write_indices):
    before = k.sum(dim=2)
    row = k[:, 0]
    thunder_ext.tensor_scatter_(k, new, write_indices, mode="circular")
    after = row * 2  # through a view named before the write
    thunder_ext.tensor_scatter_(k, new * 3, write_indices + 1, mode="circular")
    return before, after, k.sum()


def test_reads_before_between_and_after_writes_match_eager_in_place():
    args = torch.randn(2, 3, 8, 4), torch.randn(2, 3, 2, 4), torch.tensor([7, 2])
    jfn = assert_matches_eager(read_around_two_writes, *args)
    assert [d.how != "copy" for d in thunder_ext.inplace_decisions(jfn)] == [True, True]


def test_stock_thunder_jit_computes_it_too_once_thunder_is_adapted():
    thunder_ext.adapt_thunder()  # stock thunder traces into the eager body, and fails on its checks of the data
    case = CASES[-3]
    cache, update, idx, cu = case.args()
    expected = reference(cache, update, idx, case.axis, case.mode, cu)
    thunder.jit(scatter)(cache, update, idx, cu, case.axis, case.mode)
    assert torch.equal(cache, expected)
