"""litgpt's KV cache under thunder_ext.jit, step by step against eager litgpt on the same weights.

Models are used as litgpt constructs them (parameters that require grad) and stepped under
``torch.inference_mode()``, as litgpt's ``generate`` steps them. Every step compares the logits and every
cache buffer with eager, checks that no buffer moved to new storage (but where a growing cache grew), and
that every cache write ran in place (none fell back to a copy). Greedy decoding picks each token from the
extension's logits, so the token checks compare the extension's own tokens.

Each test runs with litgpt's cache (``set_kv_cache``) and with ``thunder_ext.set_kv_cache``'s growing cache
(the ``cache`` fixture), whose smallest bucket, 8 positions, makes these short sequences grow.
"""

import pytest
import torch

import thunder_ext
from helpers import THUNDER_VARIANTS, VOCAB, Pair, caches, greedy_without_cache, small_llama

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")
from thunder.tests.litgpt_model import Config as ThunderTestConfig  # noqa: E402  (thunder's kv-cache test configs)


# The growing cache under both executor sets where the test takes a path of its own (a circular cache), under
# thunder's defaults where it adds a configuration.
BOTH = ["litgpt", "growing"]
GROWING_ON_DEFAULTS = ["litgpt", pytest.param("growing", marks=pytest.mark.executor_sets("defaults"))]


# the growing cache under the defaults (CI time): under the torch.compile executor its growths across buckets are
# test_growing_cache's, and a row of positions per sequence writes through litgpt's own forward in both caches
@pytest.mark.parametrize("cache", GROWING_ON_DEFAULTS)
def test_twenty_greedy_steps_with_cache_give_the_tokens_of_decoding_without_cache(cache):
    torch.manual_seed(0)
    pair = Pair(small_llama(n_query_groups=2), growing=cache == "growing")
    prompt = torch.randint(0, VOCAB, (1, 5))
    expected = greedy_without_cache(pair.eager, prompt, 20)  # before any cache exists

    pair.set_kv_cache(batch_size=1, max_seq_length=32)
    assert torch.equal(pair.greedy(prompt, 20), expected)


@pytest.mark.parametrize(
    "n_query_groups, cache",
    # CI time: litgpt's cache with multi-query (1), grouped (2) and multi-head (8) attention under thunder's
    # defaults, grouped under both sets (the write is the same for every grouping; the grouping changes the reads);
    # the growing cache with grouped queries once
    [(2, "litgpt")]
    + [pytest.param(n, cache, marks=pytest.mark.executor_sets("defaults")) for n, cache in
       [(1, "litgpt"), (8, "litgpt"), (2, "growing")]],
)
def test_grouped_query_attention(n_query_groups, cache):
    torch.manual_seed(0)
    pair = Pair(small_llama(n_query_groups=n_query_groups), growing=cache == "growing")
    pair.set_kv_cache(batch_size=1, max_seq_length=16)
    pair.greedy(torch.randint(0, VOCAB, (1, 4)), 3)
    assert pair.copy.transformer.h[0].attn.kv_cache.k.shape[1] == n_query_groups


@pytest.mark.parametrize("cache", GROWING_ON_DEFAULTS)
def test_batch_of_three_with_a_row_of_positions_per_sequence(cache):
    # A 2-D input_pos makes litgpt write each row with its own `t[i].index_copy_`.
    torch.manual_seed(0)
    pair = Pair(small_llama(n_query_groups=4), growing=cache == "growing")
    pair.set_kv_cache(batch_size=3, max_seq_length=16)
    logits = pair.step(torch.randint(0, VOCAB, (3, 4)), torch.arange(4).expand(3, 4).contiguous())
    positions = torch.tensor([[4], [7], [5]])  # the sequences have drifted apart
    for _ in range(3):
        logits = pair.step(logits[:, -1].argmax(-1, keepdim=True), positions)
        positions = positions + 1
    assert len(thunder_ext.inplace_decisions(pair.jitted)) == 2 * 2 * 3  # layers x (k, v) x rows


@pytest.mark.parametrize("cache", BOTH)
def test_sliding_window_writes_a_circular_cache(cache):
    # litgpt writes at input_pos % max_cache_len: 12 steps wrap a 4-slot cache three times.
    torch.manual_seed(0)
    pair = Pair(small_llama(sliding_window_size=4, sliding_window_indices=[1, 1]), growing=cache == "growing")
    pair.set_kv_cache(batch_size=1, max_seq_length=32)
    assert pair.copy.transformer.h[0].attn.kv_cache.k.shape[2] == 4
    pair.greedy(torch.randint(0, VOCAB, (1, 3)), 13)


@pytest.mark.parametrize("cache", GROWING_ON_DEFAULTS)
def test_bfloat16_autocast(executor_set, cache):
    torch.manual_seed(0)
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    # Inductor keeps a fused region's bfloat16 intermediates in float32 where eager rounds each op, and the
    # growing cache prefills in chunks (a token at a time at 8 positions) where eager takes the prompt in one
    # call: either differs by bfloat16 rounding (1e-3 seen), more than bfloat16's default absolute tolerance of 1e-5
    rounded_apart = executor_set == "torch_compile" or cache == "growing"
    tolerance = {"atol": 5e-3, "rtol": 1.6e-2} if rounded_apart else {}
    pair = Pair(small_llama(), context=autocast, growing=cache == "growing", **tolerance)
    # The cache is allocated in the autocast dtype: see docs/design.md#limits for a float32 cache.
    pair.set_kv_cache(batch_size=1, max_seq_length=16, dtype=torch.bfloat16)
    pair.greedy(torch.randint(0, VOCAB, (1, 4)), 4)
    assert all(t.dtype == torch.bfloat16 for t in caches(pair.copy))


@pytest.mark.executor_sets("defaults")  # CI time: new caches for the prologue to check, whatever runs the ops
@pytest.mark.parametrize("cache", BOTH)
def test_set_kv_cache_again_between_generations(cache):
    torch.manual_seed(0)
    pair = Pair(small_llama(), growing=cache == "growing")
    first_buffers = []
    for batch_size in (1, 1, 2):
        pair.set_kv_cache(batch_size=batch_size, max_seq_length=16)
        first_buffers.append(caches(pair.copy)[0])
        pair.greedy(torch.randint(0, VOCAB, (batch_size, 4)), 3)
    assert first_buffers[0] is not first_buffers[1], "set_kv_cache must give new buffers"


# CI time: the growing cache, and the torch.compile executor, with three of thunder's variants: gpt-neox (parallel
# residual, LayerNorm), a llama with grouped queries, a llama with condensed rope; every variant under the defaults
TORCH_COMPILE_VARIANTS = ("gpt-neox-like", "llama2-like", "long-context-like")
GROWN_VARIANTS = ("long-context-like", "gpt-neox-like")
DEFAULTS_ONLY = pytest.mark.executor_sets("defaults")


@pytest.mark.parametrize(
    "name, cache",
    [(n, "litgpt") if n in TORCH_COMPILE_VARIANTS else pytest.param(n, "litgpt", marks=DEFAULTS_ONLY)
     for n in THUNDER_VARIANTS]
    + [pytest.param(n, "growing", marks=DEFAULTS_ONLY) for n in GROWN_VARIANTS],
)  # fmt: skip
def test_thunder_kvcache_variants_prefill_then_decode(name, cache):
    torch.manual_seed(0)
    model = litgpt.model.GPT(ThunderTestConfig.from_name(name))
    model.max_seq_length = 8
    pair = Pair(model.eval(), growing=cache == "growing", rtol=1e-4, atol=1e-4)
    prompt = torch.randint(0, 200, (1, 3))
    expected = greedy_without_cache(pair.eager, prompt, 3)
    pair.set_kv_cache(batch_size=1)
    assert torch.equal(pair.greedy(prompt, 3), expected)
    assert len(thunder_ext.inplace_decisions(pair.jitted)) == 2 * len(pair.copy.transformer.h)
