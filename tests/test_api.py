"""The public API tells the truth: decisions describe the trace that ran, name the user's line, and a
transform without its executor, or with it after a fusion executor, says what is missing."""

import inspect

import pytest
import thunder
import torch

import thunder_ext
from helpers import assert_matches_eager


def write_or_overlap(x, idx, overlap: bool):
    # thunder keys its cache on `overlap`: two cache entries, one write in place, the other a copy.
    if overlap:
        x.copy_(torch.index_copy(x, 0, idx, x[:1]))  # a source overlapping the target: a copy
    else:
        x.index_copy_(0, idx, x[2:3] * 2)
    return x * 1


@pytest.mark.executor_sets("defaults")  # CI time (27 s of Inductor): which entry ran is thunder's, whatever runs the ops
def test_decisions_follow_the_cache_entry_that_ran_last():
    x, idx = torch.randn(4, 2), torch.tensor([3])
    jfn = thunder_ext.jit(write_or_overlap)
    hows = []
    for overlap in (False, True, False):  # the third call hits the first cache entry: no compilation
        jfn(x, idx, overlap)
        (write,) = [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols if "copy_to_out" in b.sym.name]
        (decision,) = thunder_ext.inplace_decisions(jfn)
        assert (write == "copy_to_out_") == (decision.how == "copy"), (write, decision)
        hows.append(decision.how)
    assert hows == ["in place at the write", "copy", "in place at the write"]


def test_decisions_name_the_source_line_and_the_bytes():
    def f(k, pos, new):
        k.index_copy_(1, pos, new)
        return k.sum()

    jfn = assert_matches_eager(f, torch.randn(2, 8, 3), torch.tensor([5]), torch.randn(2, 1, 3))
    (decision,) = thunder_ext.inplace_decisions(jfn)
    lines, first = inspect.getsourcelines(f)
    assert decision.source == f"{__file__}:{first + 1}: k.index_copy_(1, pos, new)"
    assert decision.nbytes == 2 * 8 * 3 * 4
    assert decision.source in str(decision) and "192 bytes" in str(decision)


def test_a_chain_of_writes_names_its_last_line():
    def f(x, y):
        x.add_(y)
        x.mul_(2)
        return x * 1

    jfn = assert_matches_eager(f, torch.randn(3), torch.randn(3))
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.source.endswith(": x.mul_(2)"), decision


def test_transform_without_its_executor_says_what_to_add():
    x = torch.zeros(2)
    jfn = thunder.jit(lambda t: t.add_(1), transforms=[thunder_ext.InplaceTransform()])
    with pytest.raises(ValueError, match=r"needs thunder_ext\.inplace_ex among the executors.*thunder_ext\.jit"):
        jfn(x)
    torch.testing.assert_close(x, torch.zeros(2))


def test_transform_with_its_executor_after_a_fusion_executor_says_to_move_it():
    # its fusion pass must run before the other executors' (what rematerialization must not recompute)
    from thunder.executors.torch_compile import torch_compile_ex

    x = torch.zeros(2)
    executors = [torch_compile_ex, thunder_ext.inplace_ex]
    jfn = thunder.jit(lambda t: t.add_(1), executors=executors, transforms=[thunder_ext.InplaceTransform()])
    message = r"needs thunder_ext\.inplace_ex .* before any fusion executor \(given: .*torchcompile, thunder_ext_inplace, "
    with pytest.raises(ValueError, match=message):
        jfn(x)
    torch.testing.assert_close(x, torch.zeros(2))
