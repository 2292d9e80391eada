"""Writes inside thunder's torch.compile executor regions (``TORCH_COMPILE_RULES`` of executors/torch_compile_inplace.py).

Each rule with a program that breaks without it, on the real executor (Inductor on the CPU). Stock
``thunder.jit`` with the same executors gives wrong values on two of them; the extension must not.
"""

import copy

import pytest
import thunder
import torch
from thunder.core import prims
from thunder.executors.torch_compile import torch_compile_ex

import thunder_ext
from fake_nvfuser import fake_nvfuser, fusion_region
from helpers import (
    VOCAB,
    Pair,
    as_claimed,
    assert_matches_eager,
    caches,
    computation,
    negated_then_read,
    pinned,
    pinned_operands_of_the_result,
    read_then_written_beside_a_free_read,
    rematerialized,
    small_llama,
    tracing,
)
from thunder_ext.benchmarks.adam import adam_step
from thunder_ext.benchmarks.measure import allocations
from thunder_ext.executors.torch_inplace import checked_index
from thunder_ext.primitive import copy_to_out_
from thunder_ext.transforms.op_kinds import fused_writes, is_copy_to_out
from thunder_ext.transforms.prove_inplace import prove_inplace_writes

pytestmark = pytest.mark.executor_sets("torch_compile")

CPU = torch.device("cpu")


def decisions(jfn) -> list[tuple[str, str]]:
    return [(d.how, d.reason) for d in thunder_ext.inplace_decisions(jfn)]


def test_an_elementwise_update_stays_in_its_region_and_allocates_nothing_of_its_size():
    def f(x, y):
        x.mul_(0.9).add_(y)

    x, y = torch.randn(1 << 20), torch.randn(1 << 20)
    jfn = assert_matches_eager(f, x, y)
    assert [how for how, _ in decisions(jfn)] == ["in a torch.compile region"]
    # Inductor re-inplaces the write: nothing of x's size (4 MiB) is allocated per call
    assert allocations(lambda: jfn(x, y), CPU).largest < x.nbytes


def test_allocations_see_what_inductor_allocates():
    # the check above can fail: a region that returns a new tensor of x's size shows it
    jfn = thunder.jit(lambda x: x * 2)
    x = torch.randn(1 << 20)
    jfn(x)
    assert allocations(lambda: jfn(x), CPU).largest >= x.nbytes


def test_rule_1_a_copy_of_an_argument_never_enters_a_region():
    # Inductor would lower the cache's new value as `new` itself (rule 1), so no region keeps this write
    # (transforms/uncomputed_writes.py): kept out of the fusion pass, it leaves the ops around it one
    # region, where given back from the region it split it in two
    def f(cache, new, z):
        cache.copy_(new)
        return (z * 2).sin() + cache.sum()

    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4), torch.randn(4))
    assert decisions(jfn) == [("copy", "`new` is an argument: no op computes it, and the write is its copy")]
    trace = thunder.last_traces(jfn)[-1]
    assert [b.args[0].name for b in trace.bound_symbols if is_copy_to_out(b)] == ["new"]
    assert sum(b.sym.is_fusion for b in trace.bound_symbols) == 1


def test_rule_1_a_copy_of_an_argument_read_after_a_write_of_it_is_right():
    # Inductor lowers y's new value as x itself, so x's later write would reach y (stock thunder: y == 3x)
    def f(x, y):
        y.copy_(x)
        x.mul_(3)
        return x + y

    jfn = assert_matches_eager(f, torch.randn(3), torch.randn(3))
    (copy, mul) = decisions(jfn)
    assert copy[0] == "copy" and mul[0] != "copy"


def test_rule_1_a_copy_of_a_view_of_a_region_input_leaves_the_region():
    # a view op computes the value, so the write is offered to the fusion pass; its storage is x's
    def f(x, y):
        y.copy_(x[0])
        x.mul_(3)
        return x[0] + y

    jfn = assert_matches_eager(f, torch.randn(2, 3), torch.randn(3))
    (copy, mul) = decisions(jfn)
    assert copy[0] == "copy" and "is a view of `x`" in copy[1]
    assert mul[0] != "copy"


def test_rule_2_a_second_write_of_a_storage_leaves_the_region():
    # found by the fuzzer (tests/fuzz_regressions/found_c8f8192c8d30.py): in one region, Inductor let the
    # sum see the later write through x[0:1]
    def f(a, x, mask, y):
        x.masked_fill_(mask, -2.0)
        s = x.sum()
        c = a.clone()
        x[0:1].add_(y)
        return s, c

    torch.manual_seed(0)
    jfn = assert_matches_eager(f, torch.randn(2, 3), torch.randn(2, 3), torch.rand(2, 3) < 0.5, torch.randn(()))
    (first, second) = decisions(jfn)
    assert first[0] != "copy" and second[0] != "copy"
    assert "already writes" in second[1]


def test_rule_3_a_read_of_the_old_value_in_the_region_sends_the_write_out():
    # found by the fuzzer (tests/fuzz_regressions/found_6c00aec4aa8f.py): Inductor ran the clone and the
    # sum after the re-inplaced masked_fill_
    def f(a0, a1, a2):
        r1 = a1.clone()
        r2 = a0.sum()
        r3 = a1.sum()
        a1.masked_fill_(a2, -2.0)
        return r1, r2, r3, a0.sum()

    torch.manual_seed(0)
    jfn = assert_matches_eager(f, torch.randn(1), torch.randn(1, 2, 4), torch.rand(4) < 0.5)
    ((how, reason),) = decisions(jfn)
    assert how != "copy" and "reads" in reason and "the old value" in reason


@pytest.mark.parametrize("shape", [(4,), (4, 2)], ids=["1d", "2d"])
@pytest.mark.parametrize("positions", [[9], [1, 9]], ids=["one", "one-of-two"])
def test_rule_4_an_index_out_of_range_leaves_the_cache_as_eager_does(positions, shape):
    # Inductor checks each index where it stores, so a region may fail having stored any part of the write;
    # eager writes nothing at [9] and writes k[1] before it fails at [1, 9]
    def f(k, pos, new):
        k.index_copy_(0, pos, new)
        return k.sum()

    def call(fn, k):
        with pytest.raises(IndexError, match="index 9 is out of bounds"):
            fn(k, torch.tensor(positions), torch.ones(len(positions), *shape[1:]))
        return k

    assert torch.equal(call(thunder_ext.jit(f), torch.zeros(shape)), call(f, torch.zeros(shape)))


def kv_write(k, v, pos, new_k, new_v):
    k.index_copy_(2, pos, new_k)
    v.index_copy_(2, pos, new_v)
    return (k * v).sum()


def checks(jfn) -> list[str]:
    return [b.args[1] for b in thunder.last_traces(jfn)[-1].bound_symbols if b.sym.id == checked_index.id]


def test_rule_4_a_kv_write_at_one_position_stays_in_its_region_after_one_check():
    k, v = torch.zeros(1, 4, 4096, 64), torch.zeros(1, 4, 4096, 64)
    args = (k, v, torch.tensor([7]), torch.randn(1, 4, 1, 64), torch.randn(1, 4, 1, 64))
    jfn = assert_matches_eager(kv_write, *args)
    assert [how for how, _ in decisions(jfn)] == ["in a torch.compile region"] * 2
    assert checks(jfn) == ["index_copy_"]  # one position, one bound: one check stands for both writes
    assert regions(jfn) == ["TorchCompile0"]
    assert allocations(lambda: jfn(*args), CPU).largest < k.nbytes


def test_rule_4_a_kv_write_at_several_positions_leaves_its_region_and_runs_in_place():
    # eager fails midway through several positions, having written the others: no check can say where
    k, v = torch.zeros(1, 4, 4096, 64), torch.zeros(1, 4, 4096, 64)
    args = (k, v, torch.tensor([7, 8]), torch.randn(1, 4, 2, 64), torch.randn(1, 4, 2, 64))
    jfn = assert_matches_eager(kv_write, *args)
    for how, reason in decisions(jfn):
        assert how.startswith("in place at the") and "no check before the region can stand for it" in reason, reason
    assert checks(jfn) == []
    assert allocations(lambda: jfn(*args), CPU).largest < k.nbytes


@pytest.mark.parametrize("bad", [4096, -1, 2**40])
def test_rule_4_a_checked_position_fails_as_the_pytorch_executor_does_with_nothing_written(bad):
    args = (
        torch.zeros(1, 2, 4096, 8),
        torch.zeros(1, 2, 4096, 8),
        torch.tensor([3]),
        torch.ones(1, 2, 1, 8),
        torch.ones(1, 2, 1, 8),
    )
    jfn = assert_matches_eager(kv_write, *args)
    assert checks(jfn) == ["index_copy_"]
    k, v = torch.zeros(1, 2, 4096, 8), torch.zeros(1, 2, 4096, 8)
    with pytest.raises(IndexError) as in_region:
        jfn(k, v, torch.tensor([bad]), *args[3:])
    assert not k.any() and not v.any()
    pytorch = thunder_ext.jit(
        kv_write, executors=[e for e in thunder.get_default_executors() if e is not torch_compile_ex]
    )
    with pytest.raises(IndexError) as on_pytorch:
        pytorch(k, v, torch.tensor([bad]), *args[3:])
    assert checks(pytorch) == [] and str(in_region.value) == str(on_pytorch.value)
    assert f"index {bad} is out of bounds for dimension 2 with size 4096" in str(in_region.value)
    assert "`k.index_copy_(2, pos, new_k)`" in str(in_region.value)


def test_rule_4_a_read_at_a_checked_index_stays_in_the_region_and_fails_as_eager_does():
    # a decode step gathers its rotary rows and its token's embedding at indices that may be out of range
    def f(k, cos, emb, pos, token):
        x = torch.nn.functional.embedding(token, emb) * cos.index_select(0, pos)
        k.index_copy_(0, pos, x)
        return k.sum()

    args = (torch.zeros(16, 8), torch.randn(16, 8), torch.randn(10, 8), torch.tensor([3]), torch.tensor([4]))
    jfn = assert_matches_eager(f, *args)
    assert decisions(jfn)[0][0] == "in a torch.compile region" and sorted(checks(jfn)) == ["embedding", "index_select"]
    for bad in ([args[3], torch.tensor([10])], [torch.tensor([16]), args[4]]):
        for fn in (jfn, f):
            k = torch.zeros(16, 8)
            with pytest.raises(IndexError, match="^index out of range in self$"):
                fn(k, *args[1:3], *bad)
            assert not k.any()


def test_rule_4_no_check_stands_for_an_op_after_a_write_of_its_region():
    # eager has written x when the position fails; a check before the region would fail before that
    def f(x, k, pos, new):
        x.add_(1)
        k.index_copy_(0, pos, new * x[0])
        return k.sum()

    args = (torch.zeros(4), torch.zeros(8, 4), torch.tensor([2]), torch.ones(1, 4))
    jfn = assert_matches_eager(f, *args)
    assert checks(jfn) == []
    assert any("no check before the region can stand for it" in reason for _, reason in decisions(jfn))
    after = []
    for fn in (jfn, f):
        x, k = torch.zeros(4), torch.zeros(8, 4)
        with pytest.raises(IndexError, match="index 8 is out of bounds"):
            fn(x, k, torch.tensor([8]), torch.ones(1, 4))
        after.append((x, k))
    assert all(torch.equal(a, b) for a, b in zip(*after))


def test_rule_4_no_check_stands_for_a_position_the_region_computes():
    def f(k, pos, new):
        k.index_copy_(0, pos + 1, new)
        return k.sum()

    jfn = assert_matches_eager(f, torch.zeros(8, 4), torch.tensor([2]), torch.ones(1, 4))
    assert checks(jfn) == []
    assert decisions(jfn)[0][0].startswith("in place at the")


def regions(jfn) -> list[str]:
    return [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols if b.sym.is_fusion]


def test_views_between_taken_out_writes_join_the_region_before_them():
    # litgpt's KVCache writes k[:bs], then v[:bs] (at two positions, a prefill: the writes leave the region):
    # the view of v between the two taken-out writes would be a region of its own
    def f(k, v, pos, new_k, new_v):
        k[:1].index_copy_(2, pos, new_k)
        v[:1].index_copy_(2, pos, new_v)
        return (k * v).sum() + k.index_select(2, pos).sum()  # the gather may fail: it stays in its run

    k, v, new_k, new_v = (
        torch.zeros(2, 4, 16, 8),
        torch.zeros(2, 4, 16, 8),
        torch.randn(1, 4, 2, 8),
        torch.randn(1, 4, 2, 8),
    )
    args = (k, v, torch.tensor([3, 4]), new_k, new_v)
    jfn = assert_matches_eager(f, *args)
    assert all(how.startswith("in place at the") for how, _ in decisions(jfn))
    assert regions(jfn) == ["TorchCompile0", "TorchCompile1"]  # before the writes, and after them


def embed_and_select(w, idx, cos):
    # litgpt's embedding and RoPE selects, which reach the region of their own between block programs
    return torch.nn.functional.embedding(idx, w), cos.index_select(0, idx)[None, :, None], cos[idx[0]]


def embed_and_scale(w, idx, cos):
    return torch.nn.functional.embedding(idx, w) * 2, cos.index_select(0, idx)[None, :, None]


def test_a_region_that_only_views_selects_and_gathers_runs_its_ops_eagerly():
    """Inductor has nothing to fuse there and would compile for a second (transforms/nothing_to_fuse.py)."""
    args = (torch.randn(10, 4), torch.tensor([3, 1, 3]), torch.randn(8, 6))
    jfn = assert_matches_eager(embed_and_select, *args)
    assert regions(jfn) == []
    ran = [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols]
    assert {"embedding", "index_select", "__getitem__"} <= set(ran), ran
    with pytest.raises(IndexError, match="index out of range"):  # as the PyTorch executor's op fails
        jfn(args[0], torch.tensor([3, 10]), args[2])


def test_a_region_that_computes_beside_its_gathers_stays_compiled():
    jfn = assert_matches_eager(embed_and_scale, torch.randn(10, 4), torch.tensor([3, 1, 3]), torch.randn(8, 6))
    (region,) = [b for b in thunder.last_traces(jfn)[-1].bound_symbols if b.sym.is_fusion]
    assert {"embedding", "mul", "index_select"} <= {op.sym.name for op in region.subsymbols}


def test_litgpts_embedding_and_rope_selects_between_block_programs_run_eagerly():
    torch.manual_seed(0)
    eager = small_llama(n_layer=3)
    jitted = thunder_ext.jit(copy.deepcopy(eager), block_programs=True)
    x = torch.randint(0, VOCAB, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(jitted(x), eager(x))
    trace = thunder.last_traces(jitted)[-1]
    assert [b.sym.name for b in trace.bound_symbols if b.sym.is_fusion] == ["TorchCompile1"]  # the head's
    assert "embedding" in [b.sym.name for b in trace.bound_symbols]


def write_then_repeat_kv(k, v, pos, new_k, new_v):
    # HF's StaticLayer.update, then repeat_kv of the keys before the values'
    k.index_copy_(2, pos, new_k * 2)
    v.index_copy_(2, pos, new_v * 2)
    keys = k[:, :, None].expand(1, 2, 2, 16, 8).reshape(1, 4, 16, 8)
    values = v[:, :, None].expand(1, 2, 2, 16, 8).reshape(1, 4, 16, 8)
    return (keys * values).sum()


def test_a_taken_out_write_moves_above_the_views_of_the_one_before_it():
    # at two positions (a prefill) both writes leave the region; V's reads nothing of K's views, nor does its
    # index_copy wait for K's write (it fails only where K's fails first), so it runs with K's: the views join
    # the region after them instead of a region of their own
    args = (torch.zeros(1, 2, 16, 8), torch.zeros(1, 2, 16, 8), torch.tensor([3, 4]), torch.randn(1, 2, 2, 8),
            torch.randn(1, 2, 2, 8))  # fmt: skip
    jfn = assert_matches_eager(write_then_repeat_kv, *args)
    assert all(how.startswith("in place at the") for how, _ in decisions(jfn))
    assert regions(jfn) == ["TorchCompile0", "TorchCompile1"]  # before the writes, and after them
    after = []
    for fn in (jfn, write_then_repeat_kv):  # K's write fails at 16, having written 5: V stays as it was
        k, v = torch.zeros(1, 2, 16, 8), torch.zeros(1, 2, 16, 8)
        with pytest.raises(IndexError, match="index 16 is out of bounds"):
            fn(k, v, torch.tensor([5, 16]), *args[3:])
        after.append((k, v))
    assert all(torch.equal(a, b) for a, b in zip(*after))


def test_an_op_that_may_fail_stays_after_the_taken_out_write_before_it():
    # the gather fails on a bad index; eager has written k by then, so it must not move before that write
    # (in a region it fails as Inductor's bounds check, a RuntimeError, as with stock thunder)
    def f(k, v, pos, idx, new):
        k.index_copy_(0, pos, new)
        got = v.index_select(0, idx)
        v.index_copy_(0, pos, new)
        return got

    def call(fn, k):
        with pytest.raises((IndexError, RuntimeError), match="out of range|out of bounds"):
            fn(k, torch.zeros(4, 2), torch.tensor([1]), torch.tensor([9]), torch.ones(1, 2))
        return k

    assert torch.equal(call(thunder_ext.jit(f), torch.zeros(4, 2)), call(f, torch.zeros(4, 2)))


def test_a_read_of_what_a_taken_out_write_wrote_stays_after_it():
    # kv[0] and kv[1] share kv's storage: the sum reads the first write, the second write reads the sum
    def f(kv, pos, new):
        kv[0].index_copy_(0, pos, new)
        total = kv.sum(0)
        kv[1].index_copy_(0, pos, new * total[pos])
        return total

    assert_matches_eager(f, torch.zeros(2, 4, 3), torch.tensor([2]), torch.randn(1, 3))


def test_a_kept_write_joins_its_producer_across_a_taken_out_write():
    # the region holds its writes last: y's write follows x's, which the sum sends out (rule 3); alone in
    # a run after it, y's write would be a copy of a value computed in another region (rule 1)
    def f(x, y):
        s = x.sum()
        x.mul_(2)
        y.mul_(3)
        return s

    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4))
    by_line = {d.source.split(": ")[-1]: d for d in thunder_ext.inplace_decisions(jfn)}
    x_write, y_write = by_line["x.mul_(2)"], by_line["y.mul_(3)"]
    assert x_write.how.startswith("in place at the") and "not in torch.compile" in x_write.reason
    assert y_write.how == "in a torch.compile region"
    assert regions(jfn) == ["TorchCompile0"]


def test_an_optimizer_step_stays_in_one_region_and_allocates_nothing_of_a_parameters_size():
    # Adam's addcmul_ and addcdiv_ convert with `Tensor.to` (a shallow copy): elementwise steps of the write
    params, grads, exp_avgs, exp_avg_sqs = ([torch.randn(1 << 16) for _ in range(2)] for _ in range(4))
    exp_avg_sqs = [t.abs() for t in exp_avg_sqs]
    jfn = assert_matches_eager(adam_step, params, grads, exp_avgs, exp_avg_sqs)
    assert {how for how, _ in decisions(jfn)} == {"in a torch.compile region"}
    assert regions(jfn) == ["TorchCompile0"]
    assert allocations(lambda: jfn(params, grads, exp_avgs, exp_avg_sqs), CPU).largest < params[0].nbytes


def test_rule_5_a_write_of_an_input_that_another_input_aliases_leaves_the_region():
    # arguments of other sizes sharing storage reach a region as two inputs; with the write of one in
    # the region, torch.compile returned `a * 1` flattened to shape (6,)
    def f(a, b):
        a.add_(1.0)
        t = b * 2
        b.sub_(t)
        return a * 1, t

    x = torch.randn(3, 2)
    jfn = assert_matches_eager(f, x, x[0])
    assert "in a torch.compile region" not in [how for how, _ in decisions(jfn)]


def test_rule_6_a_region_that_returns_a_clone_of_the_written_value_sends_the_write_out():
    # found by the fuzzer (tests/fuzz_regressions/found_aaea656a5649.py): Inductor returned r4 as r1's own
    # buffer, so the fill of r1 after the region reached r4
    def f(a1, a2):
        r1 = a1.clone()
        r1.add_(a2)
        r1[0:1]  # a view of the new value keeps the add's write (else the fill's write replaces it)
        r4 = r1.clone()
        r1.fill_(-2.0)
        return r1, r4

    jfn = assert_matches_eager(f, torch.randn(2), torch.randn(()))
    by_line = {d.source.split(": ")[-1]: d for d in thunder_ext.inplace_decisions(jfn)}
    assert "which Inductor may return as the written buffer itself" in by_line["r1.add_(a2)"].reason


def test_a_write_into_a_view_of_an_intermediate_then_into_an_input_matches_eager():
    # a wrong value before regions were rebuilt: a later region recomputed t * 2, losing the write into t[0]
    def f(x, y):
        t = x * 2
        t[0].add_(1)
        y.mul_(t.sum())
        return t

    assert_matches_eager(f, torch.randn(3, 4), torch.randn(3))


@pytest.mark.parametrize(
    "f, make_args",
    [
        (lambda x: (x.view(-1).add_(1), x * 2)[-1], lambda: [torch.randn(3, 4)]),
        (
            lambda cache, slots, new: (cache.view(-1, cache.shape[-1]).index_copy_(0, slots, new), cache.sum())[-1],
            lambda: [torch.randn(4, 8, 16), torch.tensor([3, 17]), torch.randn(2, 16)],
        ),
    ],
    ids=["through-a-view-to-its-base", "paged-through-a-flattened-view"],
)
def test_a_region_that_runs_in_order_is_checked_op_by_op(f, make_args):
    # read as one op, the later region reads the written storage through names made before the write
    # (a view it renames): the ordering check raised InplaceOrderingError on these valid programs
    assert_matches_eager(f, *make_args())


def test_the_fusion_pass_receives_what_a_write_overwrites_pinned():
    jfn = assert_matches_eager(read_then_written_beside_a_free_read, torch.randn(3), torch.randn(3))
    assert pinned_operands_of_the_result(thunder.last_traces(jfn)[-1]) == [True, False]


# both fusion executors, the one that runs its ops in order and the one that schedules them (nvFuser's stand-in)
REMATERIALIZING = pytest.mark.parametrize(
    "executor, claimed, how, region",
    [
        (torch_compile_ex, True, "in a torch.compile region", "TorchCompile1"),
        (fake_nvfuser, False, "in place in an nvFuser region", "nvFusion1"),
    ],
    ids=["torch.compile", "nvFuser stand-in"],
)


@REMATERIALIZING
def test_no_region_recomputes_a_write_of_an_earlier_one(executor, claimed, how, region):
    remat = negated_then_read(executor, pin=True, claimed=claimed)
    assert [bool(fused_writes(b)) for b in remat.bound_symbols if b.sym.is_fusion] == [True, False]

    proved, decisions = prove_inplace_writes(remat)
    assert [d.how for d in decisions] == [how]
    a = torch.randn(4)
    ours = a.clone()
    torch.testing.assert_close(proved.python_callable()(ours), torch.exp(-2 * a))
    torch.testing.assert_close(ours, -a)


@REMATERIALIZING
def test_the_checker_refuses_a_region_that_recomputes_a_write(executor, claimed, how, region):
    # unpinned, rematerialization copies `neg` and the write into the region that reads their result,
    # which would then negate the already negated x a second time
    remat = negated_then_read(executor, pin=False, claimed=claimed)
    assert fused_writes(remat.bound_symbols[1]), "the premise: rematerialization copied the write"
    with pytest.raises(thunder_ext.InplaceOrderingError, match=f"`{region}` recomputes .* and writes again"):
        prove_inplace_writes(remat)


def test_a_region_that_recomputes_a_write_would_undo_it():
    # the premise of the refusal, run: the stand-in's stock trace negates x twice, leaving it as it was
    remat = negated_then_read(fake_nvfuser, pin=False, claimed=False)
    a = torch.randn(4)
    stock = a.clone()
    remat.python_callable()(stock)
    assert torch.equal(stock, a)


def doubled_then_overwritten(pin):
    """x * 2 computed by one region, x overwritten between it and the region that reads x * 2, after
    rematerialization, pinned or not."""
    with tracing("x", "y") as (trace, (x, y)):
        doubled = prims.mul(x, 2.0)
        w = copy_to_out_(y, out=x)
        result = prims.add(prims.exp(doubled), w)
    trace.bound_symbols[1] = as_claimed(trace.bound_symbols[1])
    trace.args = [x, y]
    ops = pinned(trace) if pin else trace.bound_symbols
    remat = rematerialized(
        trace,
        torch_compile_ex.fuse(fusion_region([x], [doubled], ops[:1]), 0),
        ops[1],
        torch_compile_ex.fuse(fusion_region([doubled, w], [result], ops[2:]), 1),
        prims.python_return.bind(result, output=None),
    )
    return remat, doubled.name in {o.name for s in remat.bound_symbols[2].subsymbols for o in s.flat_proxy_outs}


def test_no_region_recomputes_a_value_across_a_write_between_regions():
    remat, recomputed = doubled_then_overwritten(pin=True)
    assert not recomputed
    proved, _ = prove_inplace_writes(remat)
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(proved.python_callable()(a.clone(), b), torch.exp(2 * a) + b)


def test_the_checker_refuses_a_region_that_recomputes_a_value_across_a_write():
    # unpinned, the second region recomputes x * 2 from x, which the write between has overwritten
    remat, recomputed = doubled_then_overwritten(pin=False)
    assert recomputed, "the premise: rematerialization recomputes x * 2 after the write"
    with pytest.raises(
        thunder_ext.InplaceOrderingError, match="`TorchCompile1` recomputes .* and touches x overwritten"
    ):
        prove_inplace_writes(remat)


def test_a_region_may_recompute_a_value_an_earlier_one_computed_after_its_write():
    # requires_grad/found_b0257163f598: the earlier region wrote x and then doubled the new value, which the later
    # region recomputes from the same new value; the verification took it for a recomputation across the write
    with tracing("x", "y") as (trace, (x, y)):
        w = copy_to_out_(y, out=x)
        doubled = prims.mul(w, 2.0)
        result = prims.exp(doubled)
    trace.bound_symbols[0] = as_claimed(trace.bound_symbols[0])
    trace.args = [x, y]
    write, double, exp = pinned(trace)
    remat = computation(
        trace,
        torch_compile_ex.fuse(fusion_region([x, y], [w], [write, double]), 0),
        torch_compile_ex.fuse(fusion_region([w], [result], [double, exp]), 1),
        prims.python_return.bind(result, output=None),
    )
    proved, _ = prove_inplace_writes(remat)
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(proved.python_callable()(a, b), torch.exp(2 * b))
    torch.testing.assert_close(a, b)


def written_after_the_region(layout, view):
    def fn(a):
        r = layout(a)
        view(r).fill_(-2.0)  # full_like: made outside the region that makes the view
        return r

    return fn


# chains of views of an intermediate that torch 2.9.1's torch.compile returns as tensors of their own: (its layout,
# the chain, an input's shape); a one-diagonal chain does only where the layout is not the one eager gives the view
RETURNED_APART = {
    "diagonal.unsqueeze.diagonal": (lambda a: a * 2.0, lambda r: r.diagonal().unsqueeze(0).diagonal(), (3, 3)),
    "diagonal.diagonal": (lambda a: a * 2.0, lambda r: r.unsqueeze(0).unsqueeze(0).diagonal().diagonal(), (3, 3)),
    "transposed, unsqueeze.diagonal": (lambda a: a.t() * 2.0, lambda r: r.unsqueeze(0).diagonal(), (3, 4)),
}


@pytest.mark.parametrize("case", RETURNED_APART)
def test_the_premise_torch_compile_returns_a_chain_with_a_diagonal_apart_from_its_base(case):
    # torch 2.9.1 (scripts/probe_inductor_view_outputs.py tabulates 600 chains; one diagonal alone, slices and
    # transposes of these layouts come back views)
    layout, view, shape = RETURNED_APART[case]

    def view_and_base(a):
        base = layout(a)
        return view(base), base

    torch._dynamo.reset()
    out, base = torch.compile(view_and_base)(torch.randn(shape))
    assert out.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()


@pytest.mark.parametrize("case", RETURNED_APART)
@pytest.mark.parametrize("one_element", [True, False])
def test_a_write_through_a_chain_with_a_diagonal_of_a_region_intermediate_reaches_it(case, one_element):
    # requires_grad/found_6925ffcdff2c, found_7e9cf5749b8a: the write ran after the region that made the view, into
    # a tensor of its own
    layout, view, shape = RETURNED_APART[case]
    assert_matches_eager(
        written_after_the_region(layout, view), torch.randn((1,) * len(shape) if one_element else shape)
    )


def viewed_written_and_returned(a):
    v = a.unsqueeze(0)
    a.copy_(a - 2.0)
    return v


def test_the_premise_torch_compile_refuses_to_write_an_input_that_requires_grad_it_returned_a_view_of():
    torch._dynamo.reset()
    with torch.no_grad(), pytest.raises(Exception, match="A view was created in no_grad mode"):
        torch.compile(viewed_written_and_returned)(torch.randn(3, requires_grad=True))


def viewed_written_then_written_through_the_view(a):
    v = a.unsqueeze(0)
    a.add_(-2.0)
    s = a.sum()
    v.zero_()
    return s


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_a_region_returning_a_view_of_an_input_that_requires_grad_made_before_its_write_gives_the_write_back(mode):
    # requires_grad/found_b9bc348fbfd9 (no_grad), found_5df78423d4eb (inference_mode): Inductor refused the region
    a = torch.randn(1)
    eager_a, jit_a = a.clone().requires_grad_(), a.clone().requires_grad_()  # leaves: cloned under mode, they'd not be
    jfn = thunder_ext.jit(viewed_written_then_written_through_the_view)
    with mode():
        torch.testing.assert_close(jfn(jit_a), viewed_written_then_written_through_the_view(eager_a))
    torch.testing.assert_close(jit_a, eager_a)
    reasons = [d.reason for d in thunder_ext.inplace_decisions(jfn)]
    assert any("a view of" in r and "made before the write" in r for r in reasons), reasons


def test_a_litgpt_decode_step_runs_in_one_region_after_its_checks():
    pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")
    torch.manual_seed(0)
    pair = Pair(small_llama())
    pair.set_kv_cache(batch_size=2, max_seq_length=32)
    prompt = torch.randint(0, VOCAB, (2, 4))
    pair.step(prompt, torch.arange(4))  # the prefill: four positions, its writes leave the region
    token = torch.randint(0, VOCAB, (2, 1))
    for position in (4, 5):
        pair.step(token, torch.tensor([position]))
    assert regions(pair.jitted) == ["TorchCompile0"]
    # the token ids; the position against the rotary rows (64) and the mask rows (32), which the cache's is too
    assert sorted(checks(pair.jitted)) == ["embedding", "index_select", "index_select"]
    assert {d.how for d in thunder_ext.inplace_decisions(pair.jitted)} == {"in a torch.compile region"}
    before = [c.clone() for c in caches(pair.copy)]
    for bad in ((token, torch.tensor([32])), (torch.full((2, 1), VOCAB), torch.tensor([6]))):
        with torch.inference_mode(), pytest.raises(IndexError, match="^index out of range in self$"):
            pair.jitted(*bad)
        assert all(torch.equal(a, b) for a, b in zip(caches(pair.copy), before))
