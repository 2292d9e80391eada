"""The proof for writes inside nvFuser regions, and what falls back, on a CPU.

nvFuser needs CUDA, so its regions are played here by the stand-in of ``fake_nvfuser.py``, which builds
regions the way nvFuser's fusion pass does and runs their ops in order; what nvFuser itself does with an
alias output is tests/test_gpu.py's part.
"""

import functools
from pathlib import Path

import pytest
import torch
import thunder
import thunder.torch as ltorch
from thunder.core import dtypes, prims
from thunder.core.devices import cpu
from thunder.core.proxies import TensorProxy
from thunder.core.transform_common import cse
from thunder.executors.torchex import ex as torch_ex
from thunder.extend import FusionExecutor

import thunder_ext
from fake_nvfuser import FakeFusionPass, fake_nvfuser, fake_nvfuser_jit, fusion_region
from helpers import (
    COPIES_NVFUSER_WOULD_ALIAS,
    assert_matches_eager,
    computation,
    pinned_operands_of_the_result,
    read_then_written_beside_a_free_read,
    tracing,
)
from thunder_ext.executors import nvfuser_inplace_available
from thunder_ext.transforms.regions.nvfuser import NVFUSER_RULES, nvfuser_write_blocker
from thunder_ext.executors.torch_inplace import plain_copy_to_out
from thunder_ext.primitive import copy_to_out_
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.op_kinds import ELEMENTWISE_PRIM_IDS, data_args, fused_writes, is_copy_to_out
from thunder_ext.transforms.regions.rules import RegionOps, register_region_rules
from thunder_ext.transforms.aliasing_as_traced import nvfuser_may_run_as_a_view, keep_written_storage_aliased_as_traced
from thunder_ext.transforms.prove_inplace import prove_inplace_writes

# Its own executors (a stand-in fusion executor), whatever thunder's defaults are.
pytestmark = pytest.mark.executor_sets("defaults")


# ---------------------------------------------------------------------------------------------------
# Without nvFuser, and how nvFuser gets the writes


def test_without_nvfuser_the_writes_run_on_the_pytorch_executor():
    available, reason = nvfuser_inplace_available()
    if available:
        pytest.skip(f"{reason} is available here")
    assert reason in (Path(__file__).parents[1] / "docs" / "gpu.md").read_text(), "docs/gpu.md names each reason"

    def f(x, y):
        x.mul_(y)

    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4), strict=True)
    assert "nvfuser" not in [e.name for e in thunder.compile_data(jfn).executors_list]
    assert [d.how for d in thunder_ext.inplace_decisions(jfn)] == ["in place at the write"]


def test_a_fusion_executor_running_copy_to_out_takes_the_writes_inplace_ex_claimed():
    # How nvFuser's fusion pass gets CUDA writes although `inplace_ex`, first in the list, claims them all:
    # `can_fuse` looks through `inplace_ex`'s operator to the `copy_to_out_` it calls.
    with tracing("x", "y") as (trace, (x, y)):
        plain_copy_to_out(y, out=x)
    (claimed,) = trace.bound_symbols
    fuser = FusionExecutor("runs_copy_to_out")
    assert not fuser.can_fuse(claimed)
    fuser.register_supported(copy_to_out_, lambda computed, *, out, after=(): True)
    assert fuser.can_fuse(claimed)
    assert claimed.sym.executor is thunder_ext.inplace_ex and claimed.subsymbols[0].sym is copy_to_out_


# ---------------------------------------------------------------------------------------------------
# The rules, one region at a time


def region(trace, *outputs):
    """Every op called in ``trace`` so far, as one region returning ``outputs``."""
    bsyms = trace.bound_symbols
    produced = {o.name for b in bsyms for o in b.flat_proxy_outs}
    inputs = {p.name: p for b in bsyms for p in b.flat_proxy_args if p.name not in produced}
    return fake_nvfuser.register_temporary_operation(
        "nvFusion0", None, inputs=list(inputs.values()), outputs=list(outputs), bsyms=list(bsyms)
    )


def blocker(fusion):
    (write,) = fused_writes(fusion)
    return nvfuser_write_blocker(RegionOps(fusion, Aliases([fusion])), write)


def test_an_elementwise_update_of_out_is_proved():
    with tracing("x", "y") as (trace, (x, y)):
        w = copy_to_out_(prims.add(x, y), out=x)
    assert blocker(region(trace, w)) is None


def test_a_chain_of_elementwise_steps_reading_out_is_proved():
    with tracing("x", "y") as (trace, (x, y)):
        scaled = prims.mul(x, 2.0)
        w = copy_to_out_(prims.where(prims.gt(y, 0.0), prims.add(scaled, y), scaled), out=x)
    assert blocker(region(trace, w)) is None


def test_a_write_of_a_broadcast_is_refused():
    # Seen on an H100 (the fuzzer's `a0.copy_(a1)`, a1 0-d): nvFuser failed to alias an output whose axis is a
    # broadcast to `out`'s iterated one ("INTERNAL ASSERT FAILED ... do not match for self replay").
    with tracing("x") as (trace, (x,)):
        y = TensorProxy("y", shape=(), device=cpu, dtype=dtypes.float32)
        w = copy_to_out_(prims.broadcast_in_dim(prims.mul(y, 2.0), (4,), ()), out=x)
    assert "is a broadcast to `x`'s shape" in blocker(region(trace, w))


def test_a_broadcast_added_to_out_is_proved():
    with tracing("x") as (trace, (x,)):
        y = TensorProxy("y", shape=(), device=cpu, dtype=dtypes.float32)
        w = copy_to_out_(prims.add(x, prims.broadcast_in_dim(y, (4,), ())), out=x)
    assert blocker(region(trace, w)) is None


def test_a_region_that_only_copies_is_refused():
    # Stock thunder's sharp edge: nvFuser may run no kernel for an aliased copy of an input.
    with tracing("x", "y") as (trace, (x, y)):
        w = copy_to_out_(y, out=x)
    fusion = region(trace, w)
    assert not is_copy_to_out(fusion), "a region of one write is a region, not a write"
    assert "is not computed in `nvFusion0`" in blocker(fusion)


def test_computed_produced_outside_the_region_is_refused():
    # The upstream KV-cache failure: index_copy ran outside the region, only the write was fused.
    with tracing("x", "computed", "y") as (trace, (x, computed, y)):
        other = prims.mul(y, 3.0)
        w = copy_to_out_(computed, out=x)
    assert "`computed` is not computed in `nvFusion0`" in blocker(region(trace, w, other))


def test_computed_returned_from_the_region_is_refused():
    with tracing("x", "y") as (trace, (x, y)):
        computed = prims.add(x, y)
        w = copy_to_out_(computed, out=x)
    assert f"`{computed.name}` is also an output" in blocker(region(trace, w, computed))


def test_computed_read_by_another_op_in_the_region_is_refused():
    with tracing("x", "y") as (trace, (x, y)):
        computed = prims.add(x, y)
        doubled = prims.mul(computed, 2.0)
        w = copy_to_out_(computed, out=x)
    assert f"`mul` also reads `{computed.name}`" in blocker(region(trace, w, doubled))


def test_out_read_by_an_op_that_does_not_compute_computed_is_refused():
    with tracing("x", "y") as (trace, (x, y)):
        total = prims.sum(x, (0,))
        w = copy_to_out_(prims.add(y, 1.0), out=x)
    assert "`sum` uses `x`" in blocker(region(trace, w, total))


def test_out_read_by_an_elementwise_step_whose_result_is_also_used_elsewhere_is_refused():
    with tracing("x", "y") as (trace, (x, y)):
        scaled = prims.mul(x, 2.0)
        other = prims.exp(scaled)  # needs `scaled`, i.e. the old x, too
        w = copy_to_out_(prims.add(scaled, y), out=x)
    assert "`mul` uses `x`" in blocker(region(trace, w, other))


def test_out_read_by_an_elementwise_step_whose_result_is_returned_is_refused():
    with tracing("x", "y") as (trace, (x, y)):
        scaled = prims.mul(x, 2.0)
        w = copy_to_out_(prims.add(scaled, y), out=x)
    assert "`mul` uses `x`" in blocker(region(trace, w, scaled))


def test_out_read_at_other_elements_towards_computed_is_refused():
    with tracing("x", "y", shape=(4, 4)) as (trace, (x, y)):
        w = copy_to_out_(prims.add(prims.transpose(x, (1, 0)), y), out=x)
    assert "`transpose` uses `x`" in blocker(region(trace, w))


def test_a_view_of_out_read_towards_computed_is_refused():
    with tracing("x", "y", shape=(4, 4)) as (trace, (x, y)):
        view = prims.transpose(x, (1, 0))
        (take_view,) = trace.bound_symbols
        trace.bound_symbols.clear()  # the view is taken outside the region
        w = copy_to_out_(prims.add(view, y), out=x)
    fusion = region(trace, w)
    (write,) = fused_writes(fusion)
    assert f"`add` uses `{view.name}`" in nvfuser_write_blocker(RegionOps(fusion, Aliases([take_view, fusion])), write)


def test_the_written_value_read_in_the_region_is_refused():
    with tracing("x", "y") as (trace, (x, y)):
        w = copy_to_out_(prims.add(x, y), out=x)
        after = prims.mul(w, 2.0)
    assert f"`mul` uses `{w.name}`" in blocker(region(trace, after))


def test_computed_by_another_write_in_the_region_is_refused():
    with tracing("x", "y", "z") as (trace, (x, y, z)):
        w = copy_to_out_(prims.add(y, 1.0), out=x)
        again = copy_to_out_(w, out=z)
    fusion = region(trace, again)
    second = fused_writes(fusion)[1]
    assert f"`{w.name}` is the result of another write" in nvfuser_write_blocker(RegionOps(fusion, Aliases([fusion])), second)


def test_out_computed_in_the_region_is_refused():
    with tracing("y") as (trace, (y,)):
        temporary = prims.mul(y, 2.0)
        w = copy_to_out_(prims.add(temporary, 1.0), out=temporary)
    assert "nvFuser aliases outputs to region inputs only" in blocker(region(trace, w))


def test_a_view_returned_by_a_region_shares_its_input_storage():
    # nvFuser can return a view op's result as a view of the region input: the storage relations must say so.
    with tracing("x", shape=(4, 4)) as (trace, (x,)):
        view = prims.transpose(x, (1, 0))
        doubled = prims.mul(x, 2.0)
    aliases = Aliases([region(trace, view, doubled)])
    assert aliases.same_storage(view, x) and not aliases.same_storage(doubled, x)


def test_a_region_reads_through_a_rename_only_what_it_renamed():
    # thunder's CUDA-graph regions take thunder's `update_aliases`: the growing cache's step under
    # CUDAGraphTransform was refused (InplaceOrderingError) for a region that only renamed a written cache.
    with tracing("x", "y") as (trace, (x, y)):
        (renamed_x,) = prims.update_aliases((x,))
        (renamed_y,) = prims.update_aliases((y,))
        doubled = prims.mul(renamed_y, 2.0)
    fusion = region(trace, renamed_x, doubled)
    assert [a.name for a in data_args(fusion)] == ["y"]


def test_the_elementwise_prims_follow_thunder():
    assert {prims.PrimIDs.ADD, prims.PrimIDs.MUL, prims.PrimIDs.EXP, prims.PrimIDs.WHERE} <= ELEMENTWISE_PRIM_IDS
    assert not {prims.PrimIDs.SUM, prims.PrimIDs.RESHAPE, prims.PrimIDs.TAKE} & ELEMENTWISE_PRIM_IDS


# ---------------------------------------------------------------------------------------------------
# The whole jit, with the fake nvFuser building regions


def regions(jfn):
    return [b for b in thunder.last_traces(jfn)[-1].bound_symbols if b.sym.is_fusion]


def test_an_elementwise_update_is_written_by_the_region():
    def f(x, y):
        x.mul_(2).add_(y)
        return y * 3

    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4), jit=fake_nvfuser_jit)
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.how == "in place in an nvFuser region", decision
    assert any(fused_writes(r) for r in regions(jfn))


def test_the_upstream_kv_cache_failure_runs_its_writes_in_place_outside_the_region():
    # thunder's copy_to_out_ PR: index_copy run by PyTorch, both writes fused into a copy-only region,
    # `computed` also read by sdpa outside it.
    def f(q, k, v, mask, idx, src):
        q.index_copy_(2, idx, src)
        k.index_copy_(2, idx, src)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, mask)

    args = (
        torch.randn(1, 4, 2, 16), torch.randn(1, 4, 3, 16), torch.randn(1, 4, 3, 16),
        torch.ones(1, 1, 2, 3, dtype=torch.bool), torch.arange(2), torch.randn(1, 4, 2, 16),
    )  # fmt: skip
    jfn = assert_matches_eager(f, *args, jit=fake_nvfuser_jit, strict=True)
    decisions = thunder_ext.inplace_decisions(jfn)
    assert len(decisions) == 2 and all(d.how.startswith("in place at the") for d in decisions), decisions
    assert all("not in nvFuser: " in d.reason and "is not computed in" in d.reason for d in decisions)
    assert not any(fused_writes(r) for r in regions(jfn))


def test_a_write_whose_value_is_read_again_in_the_region_falls_back_to_a_reported_copy():
    def f(x):
        x.add_(1)
        return x * 2

    jfn = assert_matches_eager(f, torch.randn(4), jit=fake_nvfuser_jit)
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.how == "copy" and "also reads" in decision.reason, decision
    with pytest.raises(thunder_ext.UnprovenInplaceError, match="also reads"):
        fake_nvfuser_jit(f, strict=True)(torch.randn(4))


def test_a_reader_of_the_old_value_in_the_region_still_runs_before_the_write_given_back():
    def f(x, y):
        old = x * 2  # read in the region only, so the region must return it for the write's `after`
        x.mul_(y)
        return old.sum()

    # grouped by dataflow, the read and the write share a region (consecutive grouping parts them at the renames)
    jit = functools.partial(fake_nvfuser_jit, fusion_type="dataflow")
    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4), jit=jit)
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.how == "copy" and "not in nvFuser: `mul` uses" in decision.reason, decision


def test_writes_through_a_view_and_into_the_base():
    def f(x, y):
        x[1:].add_(y[1:])
        x.mul_(2)
        return x.sum()

    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4), jit=fake_nvfuser_jit)
    assert len(thunder_ext.inplace_decisions(jfn)) == 2


def test_a_view_of_a_written_value_that_leaves_the_region_stays_a_view_of_out():
    # The write leaves its region (the region also takes the view), and the region is split at it
    # instead of rebuilt without it: rebuilt, the region would return `v` as a view of the computed
    # value, which is no view of `x` where the write is a copy, and `v.mul_` would miss `x`.
    def f(x, y):
        x.add_(y)
        v = x[:, 0:]
        total = x.sum()
        v.mul_(2)
        return total

    jfn = assert_matches_eager(f, torch.randn(2, 3), torch.randn(2, 3), jit=fake_nvfuser_jit)
    first = thunder_ext.inplace_decisions(jfn)[0]
    assert first.how == "in place at the write" and "not in nvFuser: `shallow_copy` uses" in first.reason, first


# ---------------------------------------------------------------------------------------------------
# Traces of regions built by hand: what no jitted function here makes the fake nvFuser build


def test_a_later_region_writes_the_written_tensor_again():
    with tracing("x") as (trace, (x,)):
        w = copy_to_out_(prims.add(x, 1.0), out=x)
        again = copy_to_out_(prims.mul(w, 2.0), out=w)
        result = prims.exp(again)
    ops = trace.bound_symbols
    trace.args = [x]
    computation(
        trace,
        fake_nvfuser.fuse(fusion_region([x], [w], ops[:2]), 0),
        fake_nvfuser.fuse(fusion_region([w], [again], ops[2:4]), 1),
        fake_nvfuser.fuse(fusion_region([again], [result], ops[4:]), 2),
        prims.python_return.bind(result, output=None),
    )
    proved, decisions = prove_inplace_writes(trace)
    assert [d.how for d in decisions] == ["in place in an nvFuser region"] * 2
    a = torch.randn(4)
    ours = a.clone()
    torch.testing.assert_close(proved.python_callable()(ours), torch.exp((a + 1) * 2))
    torch.testing.assert_close(ours, (a + 1) * 2)


def test_a_write_into_a_temporary_of_the_region_is_given_back_with_the_temporary():
    with tracing("y") as (trace, (y,)):
        temporary = prims.mul(y, 2.0)
        w = copy_to_out_(prims.add(temporary, 1.0), out=temporary)
        result = prims.exp(w)
    ops = trace.bound_symbols
    trace.args = [y]
    computation(
        trace,
        fake_nvfuser.fuse(fusion_region([y], [w], ops[:3]), 0),
        fake_nvfuser.fuse(fusion_region([w], [result], ops[3:]), 1),
        prims.python_return.bind(result, output=None),
    )
    proved, (decision,) = prove_inplace_writes(trace)
    assert decision.how == "copy" and "region inputs only" in decision.reason
    region, write = [b for b in proved.bound_symbols if b.sym.name != "python_del"][:2]
    assert temporary.name in {o.name for o in region.flat_proxy_outs} and is_copy_to_out(write)
    a = torch.randn(4)
    torch.testing.assert_close(proved.python_callable()(a), torch.exp(a * 2 + 1))


def test_a_view_of_the_written_value_that_a_region_returns_is_the_new_value():
    # Seen on an H100: the growing cache's prefill failed to compile (InplaceOrderingError). nvFuser took the
    # view of the written cache that sdpa reads into a region of its own, and the checker, taking the region
    # for one op that reads the new value, took its result, a view of that input, for a view of the old one.
    with tracing("x") as (trace, (x,)):
        w = copy_to_out_(prims.add(x, 1.0), out=x)
        view = prims.shallow_copy(w)
        result = prims.exp(view)
    ops = trace.bound_symbols
    trace.args = [x]
    computation(
        trace,
        fake_nvfuser.fuse(fusion_region([x], [w], ops[:2]), 0),
        fake_nvfuser.fuse(fusion_region([w], [view], ops[2:3]), 1),
        fake_nvfuser.fuse(fusion_region([view], [result], ops[3:]), 2),
        prims.python_return.bind(result, output=None),
    )
    proved, _ = prove_inplace_writes(trace)  # before: "`nvFusion2` reads `t2`, which shares storage with `x`..."
    a = torch.randn(4)
    ours = a.clone()
    torch.testing.assert_close(proved.python_callable()(ours), torch.exp(a + 1))
    torch.testing.assert_close(ours, a + 1)


def test_a_read_of_the_old_value_after_the_region_is_an_ordering_error():
    with tracing("x") as (trace, (x,)):
        w = copy_to_out_(prims.add(x, 1.0), out=x)
        stale = prims.exp(x)
    ops = trace.bound_symbols
    trace.args = [x]
    computation(
        trace,
        fake_nvfuser.fuse(fusion_region([x], [w], ops[:2]), 0),
        fake_nvfuser.fuse(fusion_region([x], [stale], ops[2:]), 1),
        prims.python_return.bind((w, stale), output=None),
    )
    with pytest.raises(thunder_ext.InplaceOrderingError, match=r"`nvFusion1` reads `x`.* in `nvFusion0` overwrote it"):
        prove_inplace_writes(trace)


def kept_in_the_region(x, y):
    x.mul_(2).add_(y)
    return y * 2


def given_back_from_the_region(x, y):
    x.add_(y)
    return x * 2  # reads the new value in the region: rule 3


@pytest.mark.parametrize(
    "f, how, line",
    [
        (kept_in_the_region, "in place in an nvFuser region", "x.mul_(2).add_(y)"),
        (given_back_from_the_region, "copy", "x.add_(y)"),
    ],
    ids=["kept", "given-back"],
)
def test_a_decision_names_the_users_line_of_a_write_the_region_flattened(f, how, line):
    # nvFuser (and the stand-in) flatten the write into the copy_to_out_ it calls, which is all the region holds
    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4), jit=fake_nvfuser_jit)
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.how == how and decision.source.endswith(line)


def test_a_copy_of_an_argument_is_never_offered_to_the_fusion_pass():
    # no region keeps it (rule 2: an aliased copy of a region input may run no kernel), so it is kept out of
    # the fusion pass (transforms/uncomputed_writes.py); given back from a region, it left the user's line
    # there (the region holds the write as its prim)
    def f(cache, new, z):
        cache.copy_(new)
        return (z * 2).sin() + cache * 2

    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4), torch.randn(4), jit=fake_nvfuser_jit)
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.how == "copy" and decision.source.endswith("cache.copy_(new)")
    assert sum(b.sym.is_fusion for b in thunder.last_traces(jfn)[-1].bound_symbols) == 1


def test_the_fusion_pass_receives_what_a_write_overwrites_pinned_down_to_its_prims():
    # the stand-in flattens each op into its prims, as nvFuser does: the tag must reach them
    f = read_then_written_beside_a_free_read
    jfn = assert_matches_eager(f, torch.randn(3), torch.randn(3), jit=fake_nvfuser_jit)
    assert pinned_operands_of_the_result(thunder.last_traces(jfn)[-1]) == [True, False]


# ---------------------------------------------------------------------------------------------------
# Copies that nvFuser would return as views of their input (transforms/aliasing_as_traced.py)


@pytest.mark.parametrize("name", COPIES_NVFUSER_WOULD_ALIAS)
def test_a_copy_of_written_storage_keeps_the_old_value_where_nvfuser_would_return_a_view(name):
    f, shape = COPIES_NVFUSER_WOULD_ALIAS[name]
    jfn = assert_matches_eager(f, torch.randn(shape), torch.randn(shape), jit=fake_nvfuser_jit)
    ran = thunder.last_traces(jfn)[-1].bound_symbols
    assert not any(nvfuser_may_run_as_a_view(p) for r in ran if r.sym.is_fusion for p in r.subsymbols), ran


def test_the_stand_in_returns_what_nvfuser_would_alias_as_a_view_of_its_input():
    # what makes the test above able to fail: without a write nothing moves the sum out of the region
    a = torch.randn(1)
    r = fake_nvfuser_jit(lambda a: a.sum())(a)
    assert r.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()


class _FusesAnything(FusionExecutor):
    def can_fuse(self, bsym):
        return True


def test_ops_of_written_storage_that_nvfuser_aliases_otherwise_leave_its_regions():
    # thunder's diagonal is a view made of a take, which nvFuser returned as a copy: a write through it was lost on
    # an H100 (cuda/found_2096e1fb38e9); a clone of written storage it returns as a view. Both run on the PyTorch
    # executor; the view that nvFuser keeps a view, the copy of storage nobody writes, and the write stay.
    with tracing("a", "b", shape=(3, 3)) as (trace, (a, b)):
        r = ltorch.mul(a, -2.0)
        kept_view = ltorch.transpose(r, 0, 1)
        diagonal = ltorch.diagonal(r)
        saved = ltorch.clone(r)
        unwritten = ltorch.clone(b)
        copy_to_out_(ltorch.full_like(diagonal, -2.0), out=diagonal)
    register_region_rules(aliasing := _FusesAnything("aliasing by prims"), NVFUSER_RULES)
    ran = keep_written_storage_aliased_as_traced(trace, executors=[aliasing])
    on_torch = {o.name for op in ran.bound_symbols if op.sym.executor is torch_ex for o in op.flat_proxy_outs}
    assert on_torch == {diagonal.name, saved.name}, ran
    # a fusion executor ahead that groups by thunder's semantics (the torch.compile executor's) takes them first
    assert keep_written_storage_aliased_as_traced(trace, executors=[_FusesAnything("torch.compile-like"), aliasing]) is trace
    # one that fuses only beside its required ops (thunder's torchcompile_xentropy, among the defaults on a GPU, can
    # fuse a sum) takes nothing for sure: on an H100 the sum of cuda/found_4c28956511b5 went back to nvFuser
    xentropy_like = _FusesAnything("xentropy-like")
    xentropy_like.required_ops = {"torch.nn.functional.nll_loss"}
    ran = keep_written_storage_aliased_as_traced(trace, executors=[xentropy_like, aliasing])
    assert {o.name for op in ran.bound_symbols if op.sym.executor is torch_ex for o in op.flat_proxy_outs} == on_torch


def through_a_transpose_of_an_intermediate(a0, a1):
    r3 = a0 * -2.0
    r3.transpose(0, 1).mul_(a1)
    return r3


def through_a_slice_of_an_intermediate(a0, a1):
    r3 = a0 * -2.0
    r3[1:].mul_(a1)
    return r3


def twins_one_written(a0):
    r1 = a0 * -2.0
    r3 = a0 * -2.0  # nvFuser's elimination of common subexpressions makes it r1
    r1.zero_()
    return r1, r3


def twins_both_written(a0, a1):
    r1 = a0 * -2.0
    r3 = a0 * -2.0
    r1.zero_()
    r3.add_(a1)
    return r1, r3


@pytest.mark.parametrize("f", [twins_one_written, twins_both_written], ids=lambda f: f.__name__)
def test_common_subexpressions_are_not_made_one_where_one_is_written(f, monkeypatch):
    # rule 2 of aliasing_as_traced: on an H200, r3 came back zeroed (cuda/found_f21d632c7a6c), or both writes went
    # into one tensor (cuda/found_571d7c9ccf0f); the stand-in eliminates them as nvFuser's pass does
    args = [torch.randn(1), torch.randn(())][: f.__code__.co_argcount]
    assert_matches_eager(f, *args, jit=fake_nvfuser_jit)
    monkeypatch.setattr(FakeFusionPass, "cse", staticmethod(cse))  # the elimination unwrapped: the rule broken
    with pytest.raises((AssertionError, thunder_ext.InplaceOrderingError)):
        assert_matches_eager(f, *args, jit=fake_nvfuser_jit)


def test_common_subexpressions_are_made_one_where_nothing_made_is_written():
    def twins_with_an_argument_written(a0, x):
        x.mul_(2)
        return a0 * -2.0 + 1, a0 * -2.0 + 1

    trace = thunder.last_traces(assert_matches_eager(twins_with_an_argument_written, torch.randn(2), torch.randn(2),
                                                     jit=fake_nvfuser_jit))[-1]  # fmt: skip
    muls = [p for b in trace.bound_symbols for p in (b.subsymbols if b.sym.is_fusion else [b]) if p.sym.name == "mul"]
    assert len(muls) == 2, muls  # x * 2, and the twins' a0 * -2.0 once


def through_a_column_slice_of_an_intermediate(a0, a1):
    r3 = a0 * -2.0
    r3[:, 1:].mul_(a1)
    return r3


@pytest.mark.parametrize(
    "f, kept",
    [(through_a_transpose_of_an_intermediate, False), (through_a_column_slice_of_an_intermediate, False),
     (through_a_slice_of_an_intermediate, True)],
    ids=["transposed", "column-slice", "row-slice"],
)  # fmt: skip
def test_a_write_through_a_view_other_than_a_contiguous_slice_is_given_back(f, kept):
    # rule 6: on an H200 nvFuser wrote through a transposed view of an intermediate in the view's logical order
    # (cuda/found_16274bd1d4e6), and into a column slice the wrong elements (scripts/gpu_probe.py)
    jfn = assert_matches_eager(f, torch.randn(3, 3), torch.randn(()), jit=fake_nvfuser_jit)
    (decision,) = thunder_ext.inplace_decisions(jfn)
    if kept:
        assert decision.how == "in place in an nvFuser region", decision
    else:
        assert decision.how == "copy" and "is a view other than a contiguous slice" in decision.reason, decision


def test_a_slice_the_pytorch_executor_runs_before_the_region_is_still_a_contiguous_slice():
    # autodiff saves the slice's old value before the write, so the slice runs outside the region, as the PyTorch
    # executor's implementation of prims.slice; on an H100 rule 6 took it for another view and gave the write back
    from test_view_write_gradients import assert_gradients_match_eager, written_through_a_view_then_read_through_it

    jfn = assert_gradients_match_eager(written_through_a_view_then_read_through_it, torch.randn(4),
                                       torch.randn(2, requires_grad=True), compile=fake_nvfuser_jit)  # fmt: skip
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.how == "in place in an nvFuser region", decision
    outside = [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols if not b.sym.is_fusion]
    assert "torch_slice_prim_impl" in outside, outside  # the case it pins


def mul_into(x, y):
    x.mul_(y)


def mul_into_rows(x, y):
    x[1:3].mul_(y[1:3])


@pytest.mark.parametrize(
    "f, view, refused",
    [(mul_into, lambda b: b, None), (mul_into, lambda b: b.t(), None), (mul_into_rows, lambda b: b, None),
     (mul_into, lambda b: b[:, :2], "writes a tensor right only where it is dense"),
     (mul_into_rows, lambda b: b.t(), "writes a slice of a tensor right only where it is contiguous")],
    ids=["contiguous", "transposed", "rows-of-contiguous", "column-slice", "rows-of-transposed"],
)  # fmt: skip
def test_an_argument_a_region_writes_is_checked_dense_before_anything_runs(f, view, refused):
    # rule 7: the layout of an argument is known only when the call runs; on an H200 a column slice of an argument
    # was written wrong by the region (stock thunder's copy_ too) and a transposed one right (scripts/gpu_probe.py)
    base = torch.randn(4, 4)
    y = torch.randn(view(base).shape)
    expected, got = base.clone(), base.clone()
    f(view(expected), y)
    jfn = fake_nvfuser_jit(f)
    if refused is None:
        jfn(view(got), y)
        assert torch.equal(got, expected)
        assert [d.how for d in thunder_ext.inplace_decisions(jfn)] == ["in place in an nvFuser region"]
    else:
        with pytest.raises(thunder_ext.NonDenseWriteError, match=f"writes the argument `x` .* in an nvFuser region, which {refused}"):
            jfn(view(got), y)
        assert torch.equal(got, base)  # nothing ran
    ran = [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols if not b.sym.name.startswith("unpack")]
    assert ran.count("check_dense_argument") == 1 and ran[0] == "check_dense_argument", ran  # first of all
