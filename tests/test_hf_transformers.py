"""HF transformers' StaticCache, written in place through thunder's "hf-transformers" recipe with the plugin,
and through ``thunder_ext.thunderfx``; ``thunder_ext.GrowingStaticCache`` and HF's default cache through them.

Tiny random Llama and Qwen2 models (2 layers, so 4 cache writes per forward: keys and values of each
layer, ``StaticLayer.update``'s ``index_copy_``), ``generate(..., cache_implementation="static")`` with
greedy decoding: tokens equal eager's, and every cache write of the last forward in place.

Two things of stock thunder 0.2.6 are worked around here, as the docs say
(docs/design.md#hf-transformers-the-hf-transformers-recipe-and-thunderfx):

- the recipe takes no ``fuser`` and asks for nvFuser, absent on a CPU (``HFTransformersOnThisDevice``);
- thunder's splitter fails on the attention mask that transformers builds inside the forward
  (``tree_flatten`` of a tensor): ``generate`` is given ``attention_mask``, so it builds the mask outside.
"""

from __future__ import annotations

import copy

import pytest
import thunder
import torch

import thunder_ext

transformers = pytest.importorskip("transformers")
from thunder.recipes import HFTransformers  # noqa: E402  (imports transformers)

from thunder_ext.buckets import capacity_for  # noqa: E402
from thunder_ext.hf_cache import GrowingStaticCache  # noqa: E402

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, max_position_embeddings=64)  # fmt: skip
MODELS = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM}
CACHE_WRITES_PER_FORWARD = 2 * TINY["num_hidden_layers"]


class HFTransformersOnThisDevice(HFTransformers):
    """thunder's hf-transformers recipe with torch.compile as its fuser where nvFuser is absent: the recipe
    takes no ``fuser`` and lists "nvfuser", which becomes ``None`` among its executors on a CPU."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if thunder.extend.get_executor("nvfuser") is None:
            self.executor_names[self.executor_names.index("nvfuser")] = "torchcompile"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles as a program of its own would: transformers' forward wrappers (``can_return_tuple``) are
    one code object for every model, and Dynamo's recompile limit counts per code object."""
    torch._dynamo.reset()


def model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return MODELS[name](getattr(transformers, f"{MODELS[name].__name__.removesuffix('ForCausalLM')}Config")(**TINY)).eval()


def generate(m, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                          cache_implementation="static")  # fmt: skip


def prompt() -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (1, 6), generator=torch.Generator().manual_seed(1))


def cache_writes(compiled) -> list:
    """The decisions of ``StaticLayer.update``'s writes (under thunder.fx, of Dynamo's graph lines that make them)."""
    return [d for d in thunder_ext.inplace_decisions(compiled) if ".index_copy_(2, " in d.source]


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors
@pytest.mark.parametrize("name", MODELS)
def test_generate_through_the_hf_recipe_with_the_plugin_writes_the_static_cache_in_place(name):
    eager = model(name)
    compiled = thunder.compile(copy.deepcopy(eager), recipe=HFTransformersOnThisDevice(), plugins="inplace")
    assert torch.equal(generate(compiled, prompt()), generate(eager, prompt()))
    writes = cache_writes(compiled)
    assert len(writes) == CACHE_WRITES_PER_FORWARD and all(d.how != "copy" for d in writes), writes


def test_generate_through_thunderfx_writes_the_static_cache_in_place():
    eager, twin = model("llama"), model("llama")
    twin.forward = thunder_ext.thunderfx(twin.forward)
    assert torch.equal(generate(twin, prompt()), generate(eager, prompt()))
    writes = cache_writes(twin.forward)  # the prefill's forward and the decode steps'
    assert len(writes) == 2 * CACHE_WRITES_PER_FORWARD and all(d.how != "copy" for d in writes), writes


def greedy(m, ids: torch.Tensor, new_tokens: int, **kwargs):
    with torch.no_grad():
        return m.generate(ids, max_new_tokens=new_tokens, do_sample=False, return_dict_in_generate=True, **kwargs)


def all_in_place(compiled, writes_per_graph: int = CACHE_WRITES_PER_FORWARD) -> list:
    writes = cache_writes(compiled)
    assert writes and len(writes) % writes_per_graph == 0 and all(d.how != "copy" for d in writes), writes
    return writes


def test_generate_with_its_default_cache_through_thunderfx_writes_a_growing_cache_in_place():
    eager, twin = model("llama"), model("llama")
    twin.forward = thunder_ext.thunderfx(twin.forward)
    ids = prompt()
    out, expected = greedy(twin, ids, 64), greedy(eager, ids, 64)  # no attention_mask: generate makes one
    assert torch.equal(out.sequences, expected.sequences)
    assert isinstance(expected.past_key_values, transformers.DynamicCache)
    assert isinstance(out.past_key_values, GrowingStaticCache) and twin.generation_config.cache_implementation is None
    all_in_place(twin.forward)


@pytest.mark.executor_sets("defaults")  # CI time: the torch.compile executor runs the default cache's test
def test_a_growing_cache_grows_at_each_bucket_edge_in_place_and_compiles_once_per_bucket():
    eager, twin = model("llama"), model("llama")
    twin.forward = thunder_ext.thunderfx(twin.forward)
    ids, new_tokens, limit = prompt(), 40, 48
    cache = GrowingStaticCache(config=twin.config, max_batch_size=1, max_cache_len=limit, min_capacity=4)
    assert [layer.capacity for layer in cache.layers] == [4, 4]
    out = greedy(twin, ids, new_tokens, attention_mask=torch.ones_like(ids), past_key_values=cache)
    assert torch.equal(out.sequences, greedy(eager, ids, new_tokens).sequences)
    # the last forward wrote position prompt + new_tokens - 2; the buckets 8, 16, 32 came before it
    assert [layer.capacity for layer in cache.layers] == [capacity_for(ids.shape[1] + new_tokens - 1, 4, limit)] * 2
    graphs = len(all_in_place(twin.forward)) // CACHE_WRITES_PER_FORWARD
    assert graphs <= 1 + 4, graphs  # the prefill's, and at most one per capacity the decode steps met (8 to 64)


@pytest.mark.executor_sets("defaults")  # CI time: the torch.compile executor runs the default cache's test
def test_a_batch_of_two_left_padded_prompts_of_different_lengths_matches_eager():
    eager, twin = model("qwen2"), model("qwen2")
    twin.forward = thunder_ext.thunderfx(twin.forward)
    ids = torch.randint(3, TINY["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # the second prompt holds 4 tokens, left-padded
    ids[1, :3] = 0
    cache = GrowingStaticCache(config=twin.config, max_batch_size=2, max_cache_len=32, min_capacity=4)
    out = greedy(twin, ids, 12, attention_mask=mask, past_key_values=cache, pad_token_id=0)
    assert torch.equal(out.sequences, greedy(eager, ids, 12, attention_mask=mask, pad_token_id=0).sequences)
    all_in_place(twin.forward)


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors
def test_generate_through_the_hf_recipe_with_the_plugin_writes_the_growing_cache_in_place():
    eager = model("llama")
    compiled = thunder.compile(copy.deepcopy(eager), recipe=HFTransformersOnThisDevice(), plugins="inplace")
    out = greedy(compiled, prompt(), 8, cache_implementation="growing")
    assert torch.equal(out.sequences, greedy(eager, prompt(), 8).sequences)
    assert isinstance(out.past_key_values, GrowingStaticCache)
    writes = cache_writes(compiled)
    assert len(writes) == CACHE_WRITES_PER_FORWARD and all(d.how != "copy" for d in writes), writes


@pytest.mark.executor_sets("defaults")  # nothing compiled
def test_a_position_past_the_limit_is_refused_before_anything_is_resized():
    cache = GrowingStaticCache(config=model("llama").config, max_batch_size=1, max_cache_len=16, min_capacity=4)
    cache.reserve(torch.arange(3))
    cache.layers[0].keys.fill_(1.0)
    before = [(layer.keys.clone(), layer.capacity) for layer in cache.layers]
    with pytest.raises(ValueError, match=r"`cache_position` runs from 15 to 16, but the cache holds positions \[0, 16\)"):
        cache.reserve(torch.tensor([15, 16]))
    assert all(torch.equal(k, layer.keys) and c == layer.capacity for (k, c), layer in zip(before, cache.layers))
    with pytest.raises(ValueError, match=r"GrowingStaticCache: `min_capacity` must be a positive int, got 0"):
        GrowingStaticCache(config=model("llama").config, max_batch_size=1, max_cache_len=16, min_capacity=0)


@pytest.mark.executor_sets("defaults")  # nothing compiled
def test_new_sequences_and_reset_return_to_the_smallest_bucket():
    cache = GrowingStaticCache(config=model("llama").config, max_batch_size=1, max_cache_len=64, min_capacity=4)
    cache.reserve(torch.arange(20))
    assert [layer.capacity for layer in cache.layers] == [32, 32]
    cache.reserve(torch.arange(6))  # a new sequence: its own bucket, nothing kept
    assert [layer.capacity for layer in cache.layers] == [8, 8]
    cache.reset()
    assert [layer.capacity for layer in cache.layers] == [4, 4]


@pytest.mark.executor_sets("defaults")  # CI time: the torch.compile executor runs the default cache's test
def test_thunderfx_leaves_a_cache_the_caller_or_the_model_names_as_it_is():
    twin = model("llama")
    twin.forward = thunder_ext.thunderfx(twin.forward)
    static = transformers.StaticCache(config=twin.config, max_batch_size=1, max_cache_len=16)
    assert greedy(twin, prompt(), 2, attention_mask=torch.ones_like(prompt()), past_key_values=static).past_key_values is static
    twin.generation_config.cache_implementation = "static"
    assert type(greedy(twin, prompt(), 2, attention_mask=torch.ones_like(prompt())).past_key_values) is transformers.StaticCache
