"""``thunder_ext.set_kv_cache``: the rules of ``thunder_ext/integrations/growing_cache.py``, each against eager litgpt with
litgpt's own cache, on the same weights, under ``torch.inference_mode()`` as litgpt's ``generate`` runs.

The models have one layer, so that each bucket's compilation is short; the sequences are a few dozen
positions, with buckets from 4 or 16 positions, so that they cross several bucket edges.
"""

import copy
import logging
import re

import pytest
import thunder
import torch
from torch.testing import assert_close

import thunder_ext
from helpers import VOCAB, ReplayedGraphs, caches, small_llama

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")
from litgpt.generate.base import generate  # noqa: E402

from thunder_ext.integrations.growing_cache import capacity_for  # noqa: E402


def eager_and_jitted(limit: int, min_capacity: int, batch_size: int = 1, **overrides):
    """An eager model with litgpt's cache of ``limit`` positions, and a ``thunder_ext.jit`` copy (``strict``: a
    write that falls back to a copy raises) with a growing cache."""
    torch.manual_seed(0)
    eager = small_llama(**{"n_layer": 1, "block_size": 64, **overrides})
    jitted = thunder_ext.jit(copy.deepcopy(eager), strict=True)
    eager.set_kv_cache(batch_size=batch_size, max_seq_length=limit)
    thunder_ext.set_kv_cache(jitted, batch_size=batch_size, max_seq_length=limit, min_capacity=min_capacity)
    return eager, jitted


def capacity(model) -> int:
    """The positions a model's (or a cache module's) first buffer holds."""
    if isinstance(model, litgpt.model.KVCache):
        return model.k.shape[2]
    return caches(getattr(model, "_model", model))[0].shape[2]


def assert_caches_hold_eagers(model, eager, positions: int) -> None:
    """The first ``positions`` of every buffer are eager's; the rest, up to the capacity, zeros."""
    for i, (ours, theirs) in enumerate(zip(caches(model._model), caches(eager))):
        assert_close(ours[:, :, :positions], theirs[:, :, :positions], msg=lambda m: f"cache buffer {i}: {m}")
        assert not ours[:, :, positions:].any(), f"cache buffer {i} holds values past position {positions}"


@pytest.mark.executor_sets("defaults")  # arithmetic, nothing compiled
def test_capacity_is_the_smallest_bucket_that_holds_the_positions():
    # (positions, bucket) at each edge of buckets from 4, with a limit that is no bucket
    edges = [(1, 4), (4, 4), (5, 8), (8, 8), (9, 16), (16, 16), (17, 24), (24, 24)]
    assert [capacity_for(p, 4, 24) for p, _ in edges] == [b for _, b in edges]
    assert all(b < 2 * p for p, b in edges if b > 4), "above the smallest bucket, less than twice the positions"


@pytest.mark.fresh_compilations  # reads each bucket's "compiled" log line
def test_decode_grows_the_cache_at_each_bucket_edge_and_a_new_sequence_starts_small(caplog, executor_set):
    eager, jitted = eager_and_jitted(limit=16, min_capacity=4)
    # a decode step's writes stay in the torch.compile executor's region; the growth copy's, at several positions, leave
    # it. Under thunder's defaults V's ops, at K's position, come between K's producer and K's write (functionalize
    # rule 3 orders them after no write), so K's write moves up to its producer, and V's producer down to its write
    in_place = ["in place at the producer", "in place at the write"]
    step = ["in a torch.compile region"] * 2 if executor_set == "torch_compile" else in_place
    caplog.set_level(logging.INFO, logger="thunder_ext")
    x, pos, capacities = torch.randint(0, VOCAB, (1, 3)), torch.arange(3), []
    with torch.inference_mode():
        for _ in range(14):  # the prompt (positions 0 to 2), then one token at a time up to the limit
            before = capacity(jitted)
            logits = jitted(x, pos)
            assert_close(logits, eager(x, pos))
            assert_caches_hold_eagers(jitted, eager, int(pos[-1]) + 1)
            capacities.append(capacity(jitted))
            decisions = thunder_ext.inplace_decisions(jitted)
            # the step's two writes (k and v), after the growth copy's two where the call grew the cache
            grew = capacities[-1] > before
            assert [d.how for d in decisions] == ["in place at the write"] * (2 if grew else 0) + step, decisions
            sources = ["growing_cache.py" in d.source for d in decisions]
            assert sources == [True] * (2 if grew else 0) + [False] * 2, decisions
            x, pos = logits[:, -1:].argmax(-1), pos[-1:] + 1
        assert capacities == [4, 4] + [8] * 4 + [16] * 8  # grown before the writes at positions 4 and 8
        # normal tensors, as litgpt's set_kv_cache makes, though grown under inference_mode: Dynamo guards on the
        # kind, so that the torch.compile executor's regions would compile again for each
        assert not any(t.is_inference() for t in [*caches(jitted._model), jitted._model.mask_cache])
        assert thunder.cache_misses(jitted) == 3  # one compilation per bucket: the prompt runs a token at a time

        new_prompt = torch.randint(0, VOCAB, (1, 2))  # positions 0 and 1 of a new sequence
        assert_close(jitted(new_prompt, torch.arange(2)), eager(new_prompt, torch.arange(2)))
        assert capacity(jitted) == 4 and thunder.cache_misses(jitted) == 3
        assert_caches_hold_eagers(jitted, eager, 2)

    logged = [r.getMessage() for r in caplog.records]
    for bucket in (4, 8, 16):
        assert f"thunder_ext: compiling GPT.forward for 1 token x 1 sequence, KV cache of {bucket} positions ..." in logged
        assert any(re.fullmatch(rf"thunder_ext: compiled GPT.forward for 1 token x 1 sequence, KV cache of {bucket} "
                                r"positions in \d+\.\d s", m) for m in logged), logged  # fmt: skip
    assert sum(m.startswith("thunder_ext: compiled the growth copy for a KV cache of") for m in logged) == 2


@pytest.mark.executor_sets("defaults")  # CI time: the torch.compile executor has test_litgpt_kvcache's sliding window
def test_a_sliding_window_cache_grows_up_to_its_window_then_wraps_beside_a_growing_global_one():
    eager, jitted = eager_and_jitted(limit=32, min_capacity=4, n_layer=2, sliding_window_size=8,
                                     sliding_window_indices=[1, 0])  # fmt: skip
    x, pos, capacities = torch.randint(0, VOCAB, (1, 3)), torch.arange(3), []
    with torch.inference_mode():
        for _ in range(16):  # the prompt, then positions 3 to 17: the window wraps at 8
            logits = jitted(x, pos)
            assert_close(logits, eager(x, pos))
            written = int(pos[-1]) + 1
            for i, (ours, theirs) in enumerate(zip(caches(jitted._model), caches(eager))):
                held = min(written, ours.shape[2])  # the window's slots, once it wraps
                assert_close(ours[:, :, :held], theirs[:, :, :held], msg=lambda m: f"cache buffer {i}: {m}")
            capacities.append(tuple(capacity(c) for c in (jitted._model.transformer.h[0].attn.kv_cache,
                                                           jitted._model.transformer.h[1].attn.kv_cache)))  # fmt: skip
            x, pos = logits[:, -1:].argmax(-1), pos[-1:] + 1
    # (sliding, global): the ring grows to its window of 8 and stays; the global cache grows on
    assert capacities == [(4, 4)] * 2 + [(8, 8)] * 4 + [(8, 16)] * 8 + [(8, 32)] * 2


@pytest.mark.executor_sets("defaults")  # CI time: the chunks and buckets are the cache's, whatever runs the ops
def test_a_prefill_at_each_length_bucket_edge_and_one_past_it_compiles_once_per_bucket():
    # buckets from 16 positions, chunks of an eighth: 16 -> 8 chunks of 2; 17 -> 5 chunks of 4 (the last one
    # token and three copies of it); 32 -> 8 chunks of 4; 33 -> 5 chunks of 8 (the last one token and seven copies)
    eager, jitted = eager_and_jitted(limit=64, min_capacity=16)
    misses = []
    with torch.inference_mode():
        for length, bucket in [(16, 16), (17, 32), (32, 32), (33, 64), (20, 32)]:
            prompt = torch.randint(0, VOCAB, (1, length))
            assert_close(jitted(prompt, torch.arange(length)), eager(prompt, torch.arange(length)))
            assert capacity(jitted) == bucket
            assert_caches_hold_eagers(jitted, eager, length)  # the copies wrote the last token's position only
            misses.append(thunder.cache_misses(jitted))
    assert misses == [1, 2, 2, 3, 3]  # a new bucket compiles its chunk once; a length in a seen bucket, nothing


@pytest.mark.executor_sets("defaults")  # CI time: a recipe's pruning, whatever the executors
def test_pruned_prologue_checks_still_tell_the_buckets_apart():
    # thunder's default recipe prunes the prologue's checks of module buffers (PrunePrologueChecks): the cache's
    # shape no longer tells the compiled entries apart, the capacity passed as `input_pos_maxp1` does
    torch.manual_seed(0)
    eager = small_llama(n_layer=1, block_size=64)
    compiled = thunder.compile(copy.deepcopy(eager), recipe=thunder_ext.DefaultExecutorsRecipe(), plugins="inplace")
    eager.set_kv_cache(batch_size=1, max_seq_length=16)
    thunder_ext.set_kv_cache(compiled, batch_size=1, max_seq_length=16, min_capacity=4)
    x, pos = torch.randint(0, VOCAB, (1, 3)), torch.arange(3)
    with torch.inference_mode():
        for position in range(3, 10):
            logits = compiled(x, pos)
            assert_close(logits, eager(x, pos))
            x, pos = logits[:, -1:].argmax(-1), torch.tensor([position])
    assert capacity(compiled) == 16 and thunder.cache_misses(compiled) == 3


@pytest.mark.executor_sets("defaults")  # CI time: the torch.compile executor has the decode and prefill tests
def test_litgpts_generate_decodes_eagers_tokens_and_compiles_nothing_for_a_seen_bucket():
    torch.manual_seed(0)
    eager = small_llama(n_layer=1, block_size=64)
    jitted = thunder_ext.jit(copy.deepcopy(eager))
    eager.set_kv_cache(batch_size=1, max_seq_length=32)
    thunder_ext.set_kv_cache(jitted, batch_size=1, max_seq_length=32, min_capacity=8)
    misses = []
    for length in (5, 4):  # one bucket; 12 tokens each, which grow the cache to 16
        prompt = torch.randint(0, VOCAB, (length,))
        expected = generate(eager, prompt, length + 12, temperature=0.0, include_prompt=False)
        assert torch.equal(generate(jitted, prompt, length + 12, temperature=0.0, include_prompt=False), expected)
        misses.append(thunder.cache_misses(jitted))
    assert misses == [2, 2] and capacity(jitted) == 16  # the buckets 8 and 16, compiled once


@pytest.mark.executor_sets("defaults")  # CI time: what graphs capture is the same under every executor set
def test_cuda_graphs_find_each_bucket_where_they_captured_it_across_generate_calls():
    """Rule 7, with a CPU stand-in for CUDA graphs that runs each replay on the tensors its capture was given
    (tests/helpers.py): each call grows the cache from 8 to 16 positions, then the next call starts again at 8,
    whose graphs were captured in the first call."""
    torch.manual_seed(0)
    eager = small_llama(n_layer=1, block_size=64)
    graphed = thunder_ext.jit(copy.deepcopy(eager), transforms=[ReplayedGraphs()], disable_torch_autograd=True)
    eager.set_kv_cache(batch_size=1, max_seq_length=32)
    thunder_ext.set_kv_cache(graphed, batch_size=1, max_seq_length=32, min_capacity=8)
    first_bucket = [t.data_ptr() for t in caches(graphed._model)]
    for length in (5, 4, 5):
        prompt = torch.randint(0, VOCAB, (length,))
        expected = generate(eager, prompt, length + 12, temperature=0.0, include_prompt=False)
        assert torch.equal(generate(graphed, prompt, length + 12, temperature=0.0, include_prompt=False), expected)
        assert capacity(graphed) == 16
    graphed(torch.zeros(1, 1, dtype=torch.int64), torch.tensor([0]))  # a new sequence: the first bucket again
    assert [t.data_ptr() for t in caches(graphed._model)] == first_bucket
    # a second set_kv_cache of the same shapes takes the same buffers, which its graphs captured
    thunder_ext.set_kv_cache(graphed, batch_size=1, max_seq_length=32, min_capacity=8)
    assert [t.data_ptr() for t in caches(graphed._model)] == first_bucket


@pytest.mark.executor_sets("defaults")  # CI time: the dtype is chosen before anything compiles
def test_a_bf16_model_given_no_dtype_gets_caches_of_its_dtype_and_generates_eagers_tokens():
    # litgpt's cache converts itself to the activations' dtype on its first call; a growing cache is made in it
    torch.manual_seed(0)
    eager = small_llama(n_layer=1, block_size=64).to(torch.bfloat16)
    jitted = thunder_ext.jit(copy.deepcopy(eager))
    eager.set_kv_cache(batch_size=1, max_seq_length=32)
    thunder_ext.set_kv_cache(jitted, batch_size=1, max_seq_length=32, min_capacity=4)  # no dtype, as README's
    assert {t.dtype for t in caches(jitted._model)} == {torch.bfloat16}
    prompt = torch.randint(0, VOCAB, (3,))
    expected = generate(eager, prompt, 15, temperature=0.0, include_prompt=False)  # grows at 4 and 8
    assert torch.equal(generate(jitted, prompt, 15, temperature=0.0, include_prompt=False), expected)


@pytest.mark.executor_sets("defaults")  # CI time: a refresh of the compiled module's buffers, before it runs
def test_litgpts_own_cache_set_after_thunder_ext_set_kv_cache_is_the_one_the_compiled_model_uses():
    torch.manual_seed(0)
    eager, jitted = eager_and_jitted(limit=16, min_capacity=4)
    x, pos = torch.randint(0, VOCAB, (1, 5)), torch.arange(5)
    with torch.inference_mode():
        assert_close(jitted(x, pos), eager(x, pos))
        for model in (eager, jitted._model):  # litgpt's own reset, as its scripts do between runs
            model.clear_kv_cache()
            model.set_kv_cache(batch_size=1, max_seq_length=48)
        assert_close(jitted(x, pos), eager(x, pos))
        assert_close(jitted(x[:, :1], pos[-1:] + 1), eager(x[:, :1], pos[-1:] + 1))
    assert jitted._model.transformer.h[0].attn.kv_cache.k.shape[2] == 48  # litgpt's, not a bucket


@pytest.mark.executor_sets("defaults")  # an eager model: nothing compiled
def test_an_eager_model_grows_its_cache_and_generates_litgpts_tokens():
    torch.manual_seed(0)
    ours, theirs = small_llama(block_size=64), None
    theirs = copy.deepcopy(ours)
    theirs.set_kv_cache(batch_size=1, max_seq_length=64)
    thunder_ext.set_kv_cache(ours, batch_size=1, max_seq_length=64, min_capacity=8)
    prompt = torch.randint(0, VOCAB, (5,))
    # litgpt passes input_pos_maxp1 to an eager model, which attends to the positions written
    assert torch.equal(generate(ours, prompt, 25, temperature=0.0), generate(theirs, prompt, 25, temperature=0.0))
    assert capacity(ours) == 32  # 24 positions written
    assert ours.max_seq_length == 64


@pytest.mark.executor_sets("defaults")  # CI time: the torch.compile executor has the decode and prefill tests
def test_a_call_for_a_list_of_logits_grows_the_cache_too():
    # lm_head_chunk_size: litgpt returns the logits in chunks; the call grows the cache, and is not chunked itself
    torch.manual_seed(0)
    theirs = small_llama(n_layer=1, block_size=64)
    eager, jitted = copy.deepcopy(theirs), thunder_ext.jit(copy.deepcopy(theirs))
    theirs.set_kv_cache(batch_size=1, max_seq_length=32)
    x = torch.randint(0, VOCAB, (1, 6))
    with torch.inference_mode():
        want = theirs(x, torch.arange(6), lm_head_chunk_size=4)
        for ours in (eager, jitted):
            thunder_ext.set_kv_cache(ours, batch_size=1, max_seq_length=32, min_capacity=4)
            got = ours(x, torch.arange(6), lm_head_chunk_size=4)
            assert len(got) == len(want) == 2 and capacity(ours) == 8
            for g, w in zip(got, want):
                assert_close(g, w)


# Bad input: the error names the argument, before anything is written or resized


def cache_state(model) -> list[torch.Tensor]:
    return [t.clone() for t in caches(getattr(model, "_model", model))]


def assert_untouched(model, before: list[torch.Tensor]) -> None:
    after = caches(getattr(model, "_model", model))
    assert [t.shape for t in after] == [t.shape for t in before]
    for a, b in zip(after, before):
        assert torch.equal(a, b)


@pytest.fixture
def decoded():
    """A jitted model and its eager twin, three positions written."""
    eager, jitted = eager_and_jitted(limit=16, min_capacity=4, batch_size=2)
    with torch.inference_mode():
        jitted(torch.randint(0, VOCAB, (2, 3)), torch.arange(3))
    return jitted


@pytest.mark.executor_sets("defaults")
@pytest.mark.parametrize(
    "x, pos, error",
    [
        (torch.zeros(3, 1, dtype=torch.long), torch.tensor([3]), r"`idx` holds 3 sequences, but the KV cache holds 2"),
        (torch.zeros(2, 1, dtype=torch.long), torch.tensor([16]),
         r"Positions in 'input_pos' must be in \[0,16\): got positions from 16 to 16"),
        (torch.zeros(2, 2, dtype=torch.long), torch.tensor([-1, 3]),
         r"Positions in 'input_pos' must be in \[0,16\): got positions from -1 to 3"),
    ],
    ids=["batch-larger-than-the-cache", "position-past-the-limit", "negative-position"],
)  # fmt: skip
def test_a_call_that_does_not_fit_the_cache_raises_before_anything_is_written(decoded, x, pos, error):
    before = cache_state(decoded)
    with torch.inference_mode(), pytest.raises(ValueError, match=error):
        decoded(x, pos)
    assert_untouched(decoded, before)


@pytest.mark.executor_sets("defaults")  # an eager model: nothing compiled
@pytest.mark.parametrize(
    "overrides, tokens, error",
    [
        ({}, 17, r"Cannot forward sequence of length 17, max seq length is only 16\."),  # litgpt's own
        ({"sliding_window_size": 4, "sliding_window_indices": [1]}, 5,
         r"Prefill length \(5\) exceeds the sliding window size \(4\)"),
    ],
    ids=["more-tokens-than-the-limit", "more-tokens-than-the-window"],
)  # fmt: skip
def test_a_call_longer_than_the_cache_reaches_the_models_own_check(overrides, tokens, error):
    model = small_llama(n_layer=1, block_size=64, **overrides)
    thunder_ext.set_kv_cache(model, batch_size=1, max_seq_length=16, min_capacity=4)
    before = cache_state(model)
    with torch.inference_mode(), pytest.raises(ValueError, match=error):
        model(torch.zeros(1, tokens, dtype=torch.long), torch.arange(tokens))
    assert_untouched(model, before)


@pytest.mark.executor_sets("defaults")  # nothing compiled
@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"batch_size": 1, "max_seq_length": 65}, r"`max_seq_length` 65 is beyond the model's block_size 64"),
        ({"batch_size": 0}, r"`batch_size` must be a positive int, got 0"),
        ({"batch_size": 1, "min_capacity": 0}, r"`min_capacity` must be a positive int, got 0"),
    ],
    ids=["max-seq-length-past-block-size", "batch-size", "min-capacity"],
)
def test_set_kv_cache_refuses_bad_arguments_and_keeps_the_cache(kwargs, error):
    model = small_llama(n_layer=1, block_size=64)
    thunder_ext.set_kv_cache(model, batch_size=1, max_seq_length=16, min_capacity=4)
    before = cache_state(model)
    with pytest.raises(ValueError, match=error):
        thunder_ext.set_kv_cache(model, **kwargs)
    assert_untouched(model, before)
    assert model.max_seq_length == 16


@pytest.mark.executor_sets("defaults")  # nothing compiled
def test_set_kv_cache_takes_a_gpt_or_what_compiles_one():
    with pytest.raises(TypeError, match=r"`model` must be a litgpt GPT, .* got Linear"):
        thunder_ext.set_kv_cache(torch.nn.Linear(2, 2), batch_size=1)
    with pytest.raises(TypeError, match=r"`model` is compiled by torch.compile"):
        thunder_ext.set_kv_cache(torch.compile(small_llama(n_layer=1)), batch_size=1)


@pytest.mark.executor_sets("defaults")  # raises while thunder traces
def test_a_gpt_given_to_set_kv_cache_then_compiled_says_which_module_to_give():
    model = small_llama(n_layer=1, block_size=64)
    thunder_ext.set_kv_cache(model, batch_size=1, max_seq_length=16)
    with torch.inference_mode(), pytest.raises(TypeError, match=r"give it the compiled module instead"):
        thunder_ext.jit(model)(torch.zeros(1, 1, dtype=torch.long), torch.tensor([0]))


def gemma2_like() -> torch.nn.Module:
    """Gemma-2's litgpt config shrunk: softcapped attention and logits, sliding windows of 8 on alternate layers."""
    config = litgpt.Config.from_name(
        "gemma-2-2b", n_layer=3, n_embd=64, n_head=4, n_query_groups=2, head_size=16, intermediate_size=128,
        vocab_size=VOCAB, padded_vocab_size=VOCAB, sliding_window_size=8,
    )  # fmt: skip
    torch.manual_seed(0)
    return litgpt.GPT(config).eval()


@pytest.mark.executor_sets("defaults")  # CI time (60 s a set): the mask is the cache's, whatever runs the ops
def test_softcapped_attention_attends_as_the_causal_reference_with_a_growing_cache(executor_set):
    # With softcapping litgpt adds the mask to the scores; its boolean mask added 1 and 0 and hid nothing, so the
    # growing cache's step attended to empty and future positions (logits 0.04 to 0.13 off). The reference is
    # litgpt's forward without a KV cache, which builds a causal (and sliding) mask of its own: logits at every
    # step, teacher-forced with its greedy tokens, prefill then decode past the window, across a growth.
    model = gemma2_like()
    assert model.config.attention_logit_softcapping is not None
    jitted = thunder_ext.jit(copy.deepcopy(model))
    thunder_ext.set_kv_cache(jitted, batch_size=1, min_capacity=8)
    tokens = torch.randint(0, VOCAB, (1, 5))
    with torch.inference_mode():
        logits = jitted(tokens, torch.arange(5))
        for step in range(14):  # positions 5 to 18: the windows wrap, the global cache grows to 32
            expected = model(tokens)
            assert_close(logits[:, -1], expected[:, -1], msg=lambda m: f"step {step}: {m}")
            nxt = expected[:, -1:].argmax(-1)
            logits = jitted(nxt, torch.tensor([tokens.shape[1]]))
            tokens = torch.cat((tokens, nxt), dim=1)
    assert capacity(jitted._model.transformer.h[1].attn.kv_cache) == 32
