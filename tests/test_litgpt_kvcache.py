"""litgpt's KV cache under thunder_ext.jit, step by step against eager litgpt on the same weights.

Models are used as litgpt constructs them (parameters that require grad) and stepped under
``torch.inference_mode()``, as litgpt's ``generate`` steps them. Every step compares the logits and every
cache buffer with eager, checks that no buffer moved to new storage, and that every cache write ran in
place (none fell back to a copy). Greedy decoding picks each token from the extension's logits, so the
token checks compare the extension's own tokens.
"""

import pytest
import torch

import thunder_ext
from helpers import THUNDER_VARIANTS, VOCAB, Pair, caches, greedy_without_cache, small_llama

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")
from thunder.tests.litgpt_model import Config as ThunderTestConfig  # noqa: E402  (thunder's kv-cache test configs)


def test_twenty_greedy_steps_with_cache_give_the_tokens_of_decoding_without_cache():
    torch.manual_seed(0)
    pair = Pair(small_llama(n_query_groups=2))
    prompt = torch.randint(0, VOCAB, (1, 5))
    expected = greedy_without_cache(pair.eager, prompt, 20)  # before any cache exists

    pair.set_kv_cache(batch_size=1, max_seq_length=32)
    assert torch.equal(pair.greedy(prompt, 20), expected)


@pytest.mark.parametrize("n_query_groups", [1, 2, 4, 8])
def test_grouped_query_attention(n_query_groups):
    torch.manual_seed(0)
    pair = Pair(small_llama(n_query_groups=n_query_groups))
    pair.set_kv_cache(batch_size=1, max_seq_length=16)
    pair.greedy(torch.randint(0, VOCAB, (1, 4)), 3)
    assert pair.copy.transformer.h[0].attn.kv_cache.k.shape[1] == n_query_groups


def test_batch_of_three_with_a_row_of_positions_per_sequence():
    # A 2-D input_pos makes litgpt write each row with its own `t[i].index_copy_`.
    torch.manual_seed(0)
    pair = Pair(small_llama(n_query_groups=4))
    pair.set_kv_cache(batch_size=3, max_seq_length=16)
    logits = pair.step(torch.randint(0, VOCAB, (3, 4)), torch.arange(4).expand(3, 4).contiguous())
    positions = torch.tensor([[4], [7], [5]])  # the sequences have drifted apart
    for _ in range(3):
        logits = pair.step(logits[:, -1].argmax(-1, keepdim=True), positions)
        positions = positions + 1
    assert len(thunder_ext.inplace_decisions(pair.jitted)) == 2 * 2 * 3  # layers x (k, v) x rows


def test_sliding_window_writes_a_circular_cache():
    # litgpt writes at input_pos % max_cache_len: 12 steps wrap a 4-slot cache three times.
    torch.manual_seed(0)
    pair = Pair(small_llama(sliding_window_size=4, sliding_window_indices=[1, 1]))
    pair.set_kv_cache(batch_size=1, max_seq_length=32)
    assert pair.copy.transformer.h[0].attn.kv_cache.k.shape[2] == 4
    pair.greedy(torch.randint(0, VOCAB, (1, 3)), 13)


def test_bfloat16_autocast(executor_set):
    torch.manual_seed(0)
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    # Inductor keeps a fused region's bfloat16 intermediates in float32 where eager rounds each op: the two
    # differ by bfloat16 rounding (1e-3 seen), more than bfloat16's default absolute tolerance of 1e-5
    tolerance = {"atol": 5e-3, "rtol": 1.6e-2} if executor_set == "torch_compile" else {}
    pair = Pair(small_llama(), context=autocast, **tolerance)
    # The cache is allocated in the autocast dtype: see docs/design.md#limits for a float32 cache.
    pair.set_kv_cache(batch_size=1, max_seq_length=16, dtype=torch.bfloat16)
    pair.greedy(torch.randint(0, VOCAB, (1, 4)), 4)
    assert all(t.dtype == torch.bfloat16 for t in caches(pair.copy))


def test_set_kv_cache_again_between_generations():
    torch.manual_seed(0)
    pair = Pair(small_llama())
    first_buffers = []
    for batch_size in (1, 1, 2):
        pair.set_kv_cache(batch_size=batch_size, max_seq_length=16)
        first_buffers.append(caches(pair.copy)[0])
        pair.greedy(torch.randint(0, VOCAB, (batch_size, 4)), 3)
    assert first_buffers[0] is not first_buffers[1], "set_kv_cache must give new buffers"


@pytest.mark.parametrize("name", THUNDER_VARIANTS)
def test_thunder_kvcache_variants_prefill_then_decode(name):
    torch.manual_seed(0)
    model = litgpt.model.GPT(ThunderTestConfig.from_name(name))
    model.max_seq_length = 8
    pair = Pair(model.eval(), rtol=1e-4, atol=1e-4)
    prompt = torch.randint(0, 200, (1, 3))
    expected = greedy_without_cache(pair.eager, prompt, 3)
    pair.set_kv_cache(batch_size=1)
    assert torch.equal(pair.greedy(prompt, 3), expected)
    assert len(thunder_ext.inplace_decisions(pair.jitted)) == 2 * len(pair.copy.transformer.h)
