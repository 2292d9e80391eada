"""On a CUDA GPU, against eager on the same GPU: the in-place paths, with nvFuser where it loads and with the
PyTorch executor alone in any case.

Every test compares outputs and every mutated argument with eager and checks
``thunder_ext.inplace_decisions``: on the PyTorch executor, how each write runs, as the same function runs
on a CPU (``check_decisions``); with nvFuser, one decision per write, and how it runs where docs/gpu.md
says (a chain of writes in its region; a region that would only copy gives its write back as a copy).
The litgpt tests step with ``Pair`` (tests/test_litgpt_kvcache.py), which also checks that no cache
buffer moved to new storage and that no write was left a copy, and decode with the extension's tokens.
Without CUDA every test is skipped; without a usable nvFuser the nvFuser variants are skipped with the
reason ``nvfuser_inplace_available`` gives. ``scripts/gpu_check.sh`` runs this file on a GPU machine and
writes docs/gpu_results.md.
"""

import copy

import pytest
import thunder
import torch

# litgpt comes with the test extra and with the GPU check's wheels; without it this module is skipped.
litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")
from thunder.tests.litgpt_model import Config as ThunderTestConfig  # noqa: E402

import thunder_ext  # noqa: E402
from helpers import (  # noqa: E402
    COPIES_NVFUSER_WOULD_ALIAS,
    THUNDER_VARIANTS,
    Pair,
    assert_matches_eager,
    clone_args,
    greedy_without_cache,
    small_llama,
)
from thunder_ext.executors import nvfuser_inplace_available  # noqa: E402
from thunder_ext.executors.nvfuser_inplace import NO_CUDA  # noqa: E402
from thunder_ext.transforms.op_kinds import fused_writes  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)

NVFUSER, WHY_NOT_NVFUSER = nvfuser_inplace_available()
IN_REGION = "in place in an nvFuser region"


def without_nvfuser():
    return [e for e in thunder.get_default_executors() if e.name != "nvfuser"]


@pytest.fixture(
    params=[
        pytest.param("nvfuser", marks=pytest.mark.skipif(not NVFUSER, reason=WHY_NOT_NVFUSER)),
        "torch",
    ]
)
def executors(request):
    """thunder's default executors (nvFuser among them), or the same without nvFuser."""
    if request.param == "torch":
        return without_nvfuser()
    defaults = list(thunder.get_default_executors())
    assert "nvfuser" in [e.name for e in defaults]
    return defaults


def cuda(*shape, **kwargs):
    return torch.randn(*shape, device="cuda", **kwargs)


def uses_nvfuser(executors):
    return "nvfuser" in [e.name for e in executors]


def run_against_eager(fn, *args, executors, **kwargs):
    """``assert_matches_eager``; returns the jitted function and its decisions. Where nvFuser builds no region,
    the decisions are also those of the same function, executors and options on copies of ``args`` on the CPU
    (where nvFuser takes nothing): the PyTorch executor and thunder's torch.compile executor (ahead under the
    ``torch_compile`` set) decide alike on both devices."""
    jfn = assert_matches_eager(fn, *args, executors=executors, **kwargs)
    decisions = thunder_ext.inplace_decisions(jfn)
    if not nvfuser_fuses(executors):
        on_cpu = thunder_ext.jit(fn, executors=executors, **kwargs)
        on_cpu(*(a.cpu() if isinstance(a, torch.Tensor) else a for a in clone_args(args)))
        expected = thunder_ext.inplace_decisions(on_cpu)
        assert [d.how for d in decisions] == [d.how for d in expected], _side_by_side(decisions, expected)
    return jfn, decisions


def _side_by_side(cuda_decisions, cpu_decisions) -> str:
    lines = ["decisions on CUDA, then on the CPU:"]
    for name, decisions in (("CUDA", cuda_decisions), ("CPU", cpu_decisions)):
        lines += [f"  {name}: {d.write} = copy_to_out_({d.computed}, out={d.out}): {d.how} ({d.reason}) at {d.source}"
                  for d in decisions]  # fmt: skip
    return "\n".join(lines)


def torch_compile_ahead(executors) -> bool:
    """thunder's torch.compile executor is among ``executors`` (the ``torch_compile`` set puts it first)."""
    return "torchcompile" in [e.name for e in executors]


def nvfuser_fuses(executors) -> bool:
    """nvFuser builds the regions: it is there, and no torch.compile executor takes the ops first."""
    return uses_nvfuser(executors) and not torch_compile_ahead(executors)


def check_decisions(decisions, executors, on_torch: list[str]) -> None:
    """How the writes run where the test says: with the PyTorch executor alone, as ``on_torch`` says, in order;
    with nvFuser, which a CPU cannot tell, one decision per write. (With the torch.compile executor ahead,
    ``run_against_eager`` compared them with the CPU's.)"""
    if uses_nvfuser(executors):
        assert len(decisions) == len(on_torch), decisions
    elif not torch_compile_ahead(executors):
        assert [d.how for d in decisions] == on_torch, decisions


def fused_regions(jfn):
    return [b for b in thunder.last_traces(jfn)[-1].bound_symbols if fused_writes(b)]


def test_the_upstream_kv_cache_failure(executors):
    # thunder's copy_to_out_ PR failed here on CUDA with nvFuser: both writes fused into a region of
    # their own while sdpa, outside it, read the values they write.
    def f(q, k, v, mask, idx, src):
        q.index_copy_(2, idx, src)
        k.index_copy_(2, idx, src)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, mask)

    args = (
        cuda(1, 4, 2, 16), cuda(1, 4, 3, 16), cuda(1, 4, 3, 16),
        torch.ones(1, 1, 2, 3, dtype=torch.bool, device="cuda"), torch.arange(2, device="cuda"), cuda(1, 4, 2, 16),
    )  # fmt: skip
    _, decisions = run_against_eager(f, *args, executors=executors, strict=True)
    assert len(decisions) == 2 and all(d.how != "copy" for d in decisions), decisions


def test_a_chain_of_writes_is_one_write(executors):
    def f(x, y):
        x.add_(y)
        x.mul_(2)
        x.sub_(1)
        return y * 2  # a reader of x's new value would read `computed` in the region: rule 3 refuses that

    jfn, (decision,) = run_against_eager(f, cuda(64, 32), cuda(64, 32), executors=executors, strict=True)
    if nvfuser_fuses(executors):
        assert decision.how == IN_REGION, decision
        assert fused_regions(jfn), "the write must be an output of the nvFuser region"
    elif not uses_nvfuser(executors) and not torch_compile_ahead(executors):
        assert decision.how == "in place at the write", decision


def test_writes_through_views(executors):
    def f(x, y, idx, src):
        x[1:].add_(y[1:])  # a view with an offset
        x.t().mul_(2)  # a transposed view of the whole
        x[:, 0].index_copy_(0, idx, src)
        return x * 1

    args = (cuda(8, 8), cuda(8, 8), torch.tensor([3, 5], device="cuda"), cuda(2))
    _, decisions = run_against_eager(f, *args, executors=executors)
    check_decisions(decisions, executors, ["in place at the write"] * 3)


def test_a_region_that_would_only_copy(executors):
    # Stock thunder's sharp edge: an nvFuser region whose only op is the copy of an input may do nothing.
    def f(x, y):
        x.copy_(y)

    _, (decision,) = run_against_eager(f, cuda(16), cuda(16), executors=executors)
    assert decision.how == "copy", decision


def test_returning_the_value_written(executors):
    # Stock thunder's other sharp edge (its issue 1109): an alias output whose source is also returned. Here
    # the function returns the write's result instead, which is `x` (docs/design.md, limits).
    def f(x, y):
        z = x + y
        x.copy_(z)
        return z

    _, decisions = run_against_eager(f, cuda(16), cuda(16), executors=executors)
    check_decisions(decisions, executors, ["copy"])  # on a CPU: `update_aliases` uses `x` before the write


def test_a_reader_of_the_old_value_next_to_the_write(executors):
    def f(x, y):
        total = x.sum(0)
        x.mul_(y)
        return total

    _, decisions = run_against_eager(f, cuda(32, 16), cuda(32, 16), executors=executors)
    check_decisions(decisions, executors, ["in place at the write"])


@pytest.mark.parametrize("name", ["sum of one element", "clone", "max over a size-1 axis"])
def test_a_copy_of_written_storage_that_nvfuser_would_return_as_a_view(name, executors):
    # nvFuser's alias analysis returns a clone, or a reduction over size-1 axes, of a region input as a view of it:
    # found by the fuzzer on an H100, the sum returned after the write was the new one (transforms/aliasing_as_traced.py)
    f, shape = COPIES_NVFUSER_WOULD_ALIAS[name]
    run_against_eager(f, cuda(*shape), cuda(*shape), executors=executors)


def test_adam_step(executors):
    params = [cuda(64, 32), cuda(32)]
    grads = [cuda(64, 32), cuda(32)]
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]

    def step(p0, p1, g0, g1, m0, v0, m1, v1):
        for p, g, m, v in ((p0, g0, m0, v0), (p1, g1, m1, v1)):
            m.lerp_(g, 0.1)
            v.mul_(0.999).addcmul_(g, g, value=0.001)
            p.addcdiv_(m, v.sqrt().add_(1e-8), value=-1e-3)

    _, decisions = run_against_eager(step, *params, *grads, *[t for s in state for t in s], executors=executors)
    # per parameter, as on a CPU: the moments at their producers, the parameter at its write (`add_` into the
    # temporary `v.sqrt()` is no write of an input: functionalized, it needs no decision)
    per_param = ["in place at the producer"] * 2 + ["in place at the write"]
    check_decisions(decisions, executors, per_param * 2)


# litgpt's KV cache: the model tests of tests/test_litgpt_kvcache.py, on the GPU


class CudaPair(Pair):
    """``Pair`` on the GPU, jitted with the given executors."""

    def __init__(self, model, *, executors, **tolerance):
        super().__init__(model.to("cuda"), **tolerance)
        self.jitted = thunder_ext.jit(self.copy, executors=executors)

    def set_kv_cache(self, **kwargs):
        super().set_kv_cache(**kwargs, device=torch.device("cuda"))

    def step(self, x, input_pos):
        return super().step(x.cuda(), input_pos.cuda())


@pytest.mark.parametrize("name", THUNDER_VARIANTS)
def test_thunder_kvcache_variants_prefill_then_decode(name, executors):
    torch.manual_seed(0)
    model = litgpt.model.GPT(ThunderTestConfig.from_name(name))
    model.max_seq_length = 8
    pair = CudaPair(model.eval(), executors=executors, rtol=1e-4, atol=1e-4)
    prompt = torch.randint(0, 200, (1, 3), device="cuda")
    expected = greedy_without_cache(pair.eager, prompt, 3)
    pair.set_kv_cache(batch_size=1)
    assert torch.equal(pair.greedy(prompt, 3), expected)
    assert len(thunder_ext.inplace_decisions(pair.jitted)) == 2 * len(pair.copy.transformer.h)


def test_llama_greedy_decoding(executors):
    torch.manual_seed(0)
    pair = CudaPair(small_llama(n_query_groups=2), executors=executors, rtol=1e-4, atol=1e-4)
    prompt = torch.randint(0, 96, (1, 5), device="cuda")
    expected = greedy_without_cache(pair.eager, prompt, 10)
    pair.set_kv_cache(batch_size=1, max_seq_length=32)
    assert torch.equal(pair.greedy(prompt, 10), expected)


def test_cuda_graphs_over_the_growing_cache_decode_eagers_tokens_across_generate_calls(executors):
    """thunder's CUDA graphs over ``set_kv_cache``'s buckets: each call grows the cache, and the next one starts
    again on the first bucket, whose graphs the first call captured (growing_cache.py's rule 7)."""
    from litgpt.generate.base import generate
    from thunder.transforms.cudagraph import CUDAGraphTransform

    torch.manual_seed(0)
    eager = small_llama(n_layer=2, block_size=64).cuda()
    graphed = thunder_ext.jit(
        copy.deepcopy(eager), executors=executors, transforms=[CUDAGraphTransform()], disable_torch_autograd=True
    )
    eager.set_kv_cache(batch_size=1, max_seq_length=32, device="cuda")
    thunder_ext.set_kv_cache(graphed, batch_size=1, max_seq_length=32, min_capacity=8, device="cuda")
    with torch.inference_mode():
        for length in (5, 4, 5):
            prompt = torch.randint(0, 96, (length,), device="cuda")
            expected = generate(eager, prompt, length + 12, temperature=0.0, include_prompt=False)
            assert torch.equal(generate(graphed, prompt, length + 12, temperature=0.0, include_prompt=False), expected)


# Differentiated writes through views (tests/test_view_write_gradients.py), on the GPU: the scatters they become
# run in nvFuser's regions or on the PyTorch executor, forward and backward.

from test_view_write_gradients import (  # noqa: E402
    PROGRAMS,
    assert_gradients_match_eager,
    check_training_steps,
    slice_mul,
    written_then_read_through_views_made_after,
    written_through_a_view_then_read_through_it,
)

ON_CUDA = [p for p in PROGRAMS if p[0].__name__ != "into_a_base_that_needs_no_grad"]  # it makes its base on the CPU


@pytest.mark.parametrize("fn, make_args, requires_grad", ON_CUDA, ids=[p[0].__name__ for p in ON_CUDA])
def test_a_differentiated_write_through_a_view_gets_eagers_gradient(fn, make_args, requires_grad, executors):
    torch.manual_seed(0)
    args = [a.cuda().requires_grad_(flag) if flag else a.cuda() for a, flag in zip(make_args(), requires_grad)]
    assert_gradients_match_eager(fn, *args, compile=lambda f: thunder_ext.jit(f, executors=executors))


def test_a_training_step_through_views_matches_eager_for_three_steps(executors):
    check_training_steps(lambda m: thunder_ext.jit(m, executors=executors), device="cuda")


IN_PLACE_ON_THE_CPU = [
    # the slice's scatter into its intermediate base (an index_copy_ the regions' rules judge as any write)
    (slice_mul, lambda: [cuda(3, requires_grad=True), cuda((), requires_grad=True)]),
    # an argument read only through what its write wrote: thunder's own form, not scattered
    (written_then_read_through_views_made_after, lambda: [cuda(4), cuda(2, requires_grad=True)]),
    (written_through_a_view_then_read_through_it, lambda: [cuda(4), cuda(2, requires_grad=True)]),
]


@pytest.mark.parametrize("fn, make_args", IN_PLACE_ON_THE_CPU, ids=[p[0].__name__ for p in IN_PLACE_ON_THE_CPU])
def test_a_differentiated_write_through_a_view_in_place_on_the_cpu_is_in_place_on_cuda(fn, make_args, executors):
    jfn = assert_gradients_match_eager(fn, *make_args(), compile=lambda f: thunder_ext.jit(f, executors=executors))
    decisions = thunder_ext.inplace_decisions(jfn)
    assert decisions and all(d.how != "copy" for d in decisions), decisions


# Every litgpt family (tests/test_litgpt_families.py) and HF family (tests/test_hf_families.py) through its
# generate with the growing cache, on the GPU: with nvFuser where it loads (HF's entry points pick their executors).

from test_hf_families import ALL_CASES as HF_CASES  # noqa: E402
from test_hf_families import check_family as check_hf_family  # noqa: E402
from test_litgpt_families import FAMILIES, family_id  # noqa: E402
from test_litgpt_families import check_family as check_litgpt_family  # noqa: E402

WITH_NVFUSER = pytest.mark.skipif(not NVFUSER, reason=WHY_NOT_NVFUSER)


@WITH_NVFUSER
@pytest.mark.parametrize("name", list(FAMILIES.values()), ids=[family_id(s) for s in FAMILIES])
def test_a_litgpt_familys_generate_with_a_growing_cache(name):
    check_litgpt_family(name, device="cuda", executors=list(thunder.get_default_executors()))


@WITH_NVFUSER
@pytest.mark.executor_sets("defaults")
@pytest.mark.parametrize("family, entry", HF_CASES)
def test_an_hf_familys_generate_with_its_default_cache(family, entry):
    torch._dynamo.reset()
    check_hf_family(family, entry, device="cuda")
