"""HF transformers' ``generate`` through each of the extension's entry points, with HF's default cache, its
``StaticCache`` and ``thunder_ext.GrowingStaticCache``: tokens equal eager's, every cache write in place.

Tiny random Llama and Qwen2 models with grouped-query attention (4 heads, 2 key-value heads; 2 layers, so 4
cache writes per forward: keys and values of each layer, the ``index_copy_`` of the cache layer's ``update``), greedy
decoding. Eager runs with HF's default ``DynamicCache``, as its users run it, unless the test says otherwise.

What each entry point does with the default cache (docs/design.md#hf-transformers-the-hf-transformers-recipe-and-thunderfx):
``thunderfx`` and ``thunder_ext.HFTransformersRecipe`` replace it by a growing cache; ``ThunderCompiler``, which
never sees the model, and thunder's own recipe with the plugin refuse it with an error that names the cache to pass.
"""

from __future__ import annotations

import copy
import functools
import logging
import re

import pytest
import thunder
import torch

import thunder_ext

transformers = pytest.importorskip("transformers")
from thunder.recipes import HFTransformers  # noqa: E402  (imports transformers)

from thunder_ext.integrations.buckets import capacity_for  # noqa: E402
from thunder_ext.integrations.hf_transformers import GrowingStaticCache, HFTransformersRecipe, masks_for_generate  # noqa: E402

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, max_position_embeddings=128)  # fmt: skip
MODELS = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM}
CACHE_WRITES_PER_FORWARD = 2 * TINY["num_hidden_layers"]
NEW_TOKENS = 64


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles as a program of its own would: transformers' forward wrappers (``can_return_tuple``) are
    one code object for every model, and Dynamo's recompile limit counts per code object."""
    torch._dynamo.reset()


def model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return MODELS[name](getattr(transformers, f"{MODELS[name].__name__.removesuffix('ForCausalLM')}Config")(**TINY)).eval()


def greedy(m, ids: torch.Tensor, new_tokens: int = NEW_TOKENS, **kwargs):
    with torch.no_grad():
        return m.generate(ids, max_new_tokens=new_tokens, do_sample=False, return_dict_in_generate=True, **kwargs)


def prompt() -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (1, 6), generator=torch.Generator().manual_seed(1))


def cache_writes(compiled) -> list:
    """The decisions of the cache layers' writes (each names its line of the cache's ``update``, at every entry
    point)."""
    return [d for d in thunder_ext.inplace_decisions(compiled) if ".index_copy_(2, " in d.source]


def all_in_place(compiled, graphs: int | None = None) -> list:
    """The cache writes of what ran last, each in place: 4 per graph, and ``graphs`` graphs if given."""
    writes = cache_writes(compiled)
    assert writes and len(writes) % CACHE_WRITES_PER_FORWARD == 0 and all(d.how != "copy" for d in writes), writes
    assert graphs is None or len(writes) == graphs * CACHE_WRITES_PER_FORWARD, writes
    return writes


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors
@pytest.mark.parametrize("name, cache", [("llama", "default"), ("qwen2", "static")])  # each model once: CI time
def test_generate_through_the_extensions_recipe_with_the_plugin_writes_the_cache_in_place(name, cache):
    eager = model(name)
    compiled = thunder.compile(copy.deepcopy(eager), recipe=HFTransformersRecipe(), plugins="inplace")
    kwargs = {"cache_implementation": "static"} if cache == "static" else {}
    out = greedy(compiled, prompt(), **kwargs)
    assert torch.equal(out.sequences, greedy(eager, prompt()).sequences)
    assert type(out.past_key_values) is (transformers.StaticCache if cache == "static" else GrowingStaticCache)
    all_in_place(compiled, graphs=1)  # the last call's: a decode step


def test_generate_through_thunderfx_writes_the_static_cache_in_place():
    eager, twin = model("llama"), model("llama")
    twin.forward = thunder_ext.thunderfx(twin.forward)
    out = greedy(twin, prompt(), attention_mask=torch.ones_like(prompt()), cache_implementation="static")
    assert torch.equal(out.sequences, greedy(eager, prompt()).sequences)
    all_in_place(twin.forward, graphs=1)  # the last call's: a decode step


def test_generate_with_its_default_cache_through_thunderfx_writes_a_growing_cache_in_place():
    eager, twin = model("llama"), model("llama")
    twin.forward = thunder_ext.thunderfx(twin.forward)
    ids = prompt()
    out, expected = greedy(twin, ids), greedy(eager, ids)  # no attention_mask: generate makes one
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


def thunders_recipe_on_this_device() -> HFTransformers:
    recipe = HFTransformers()  # thunder's own, its fuser renamed where nvFuser is absent, as the README says
    if thunder.extend.get_executor("nvfuser") is None:
        recipe.executor_names[recipe.executor_names.index("nvfuser")] = "torchcompile"
    return recipe


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors
def test_thunders_recipe_with_the_plugin_writes_a_growing_cache_passed_and_refuses_the_default():
    eager = model("llama")
    compiled = thunder.compile(copy.deepcopy(eager), recipe=thunders_recipe_on_this_device(), plugins="inplace")
    out = greedy(compiled, prompt(), 8, past_key_values=GrowingStaticCache(compiled.config))
    assert torch.equal(out.sequences, greedy(eager, prompt(), 8).sequences)
    assert isinstance(out.past_key_values, GrowingStaticCache)
    all_in_place(compiled, graphs=1)
    with pytest.raises(NotImplementedError, match=r"HF's DynamicCache \(generate\(\)'s default cache\) grows by torch.cat.*"
                                                  r"past_key_values=thunder_ext.GrowingStaticCache\(config=model.config\)"):  # fmt: skip
        greedy(compiled, prompt(), 8)


def test_generate_through_thunder_compiler_writes_a_growing_cache_passed_and_refuses_the_default():
    eager, twin = model("llama"), model("llama")
    backend = thunder_ext.ThunderCompiler()
    twin.forward = torch.compile(twin.forward, backend=backend)
    out = greedy(twin, prompt(), past_key_values=GrowingStaticCache(twin.config))
    assert torch.equal(out.sequences, greedy(eager, prompt()).sequences)
    all_in_place(backend)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match=r"this graph calls torch.vmap.*"
                                                                      r"past_key_values=thunder_ext.GrowingStaticCache\(config=model.config\)"):  # fmt: skip
        greedy(twin, prompt(), 2)


def calls(compiled) -> int:
    return thunder.cache_hits(compiled) + thunder.cache_misses(compiled)


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors
def test_beam_search_through_the_extensions_recipe_calls_the_compiled_model_and_gives_eagers_tokens():
    # thunder's recipe binds generate and _sample to the compiled module; beam search reached the model uncompiled
    eager = model("llama")
    compiled = thunder.compile(copy.deepcopy(eager), recipe=HFTransformersRecipe(), plugins="inplace")
    out = greedy(compiled, prompt(), 8, num_beams=2)
    assert torch.equal(out.sequences, greedy(eager, prompt(), 8, num_beams=2).sequences)
    assert calls(compiled) == 8  # a prefill and seven decode steps, each of two beams
    all_in_place(compiled, graphs=1)


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors
def test_assisted_generation_through_the_recipe_runs_uncompiled_and_says_so(caplog):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    eager = model("llama")
    compiled = thunder.compile(copy.deepcopy(eager), recipe=HFTransformersRecipe(), plugins="inplace")
    out = greedy(compiled, prompt(), 8, prompt_lookup_num_tokens=3)
    assert torch.equal(out.sequences, greedy(eager, prompt(), 8, prompt_lookup_num_tokens=3).sequences)
    assert calls(compiled) == 0
    said = [m for m in map(logging.LogRecord.getMessage, caplog.records) if "runs _assisted_decoding with" in m]
    assert said == ["thunder_ext: LlamaForCausalLM.generate() runs _assisted_decoding with the model uncompiled: it "
                    "rolls back its cache, which only HF's DynamicCache does and thunder 0.2.6 does not compile, or is "
                    "not compiled by this recipe"]  # fmt: skip


@pytest.mark.executor_sets("defaults")  # refused before anything compiles
@pytest.mark.parametrize("entry", ["recipe", "thunderfx"])
def test_generate_without_a_cache_is_refused_by_name_before_anything_runs(entry):
    m = model("llama")
    if entry == "recipe":
        m = compiled = thunder.compile(m, recipe=HFTransformersRecipe(), plugins="inplace")
    else:
        m.forward = compiled = thunder_ext.thunderfx(m.forward)
    refusal = (r"^thunder_ext: LlamaForCausalLM.generate\(use_cache=False\) cannot be compiled: HF builds the "
               r"attention mask of a call without a cache with torch.vmap")
    with pytest.raises(NotImplementedError, match=refusal):
        greedy(m, prompt(), 2, use_cache=False)
    assert entry == "thunderfx" or calls(compiled) == 0


@pytest.mark.executor_sets("defaults")  # nothing compiled
def test_jit_of_an_hf_model_says_generate_runs_it_uncompiled_once_and_that_it_has_not_run():
    jitted = thunder_ext.jit(model("llama"))
    with pytest.raises(ValueError, match=r"^thunder_ext.inplace_decisions: the compiled LlamaForCausalLM has not run yet: call it first$"):
        thunder_ext.inplace_decisions(jitted)
    with pytest.warns(UserWarning, match=r"thunder_ext.jit\(LlamaForCausalLM\).generate\(\) runs the model uncompiled") as warned:
        greedy(jitted, prompt(), 2)
        greedy(jitted, prompt(), 2)
    assert sum("thunder_ext.jit" in str(w.message) for w in warned) == 1


@pytest.mark.executor_sets("defaults")  # nothing compiled
@pytest.mark.parametrize("name", MODELS)  # Llama's config names no layer kinds (one mask), Qwen2's does (a dict)
@pytest.mark.parametrize("attention", ["sdpa", "eager"])  # a bool mask; 0 and the dtype's least value
@pytest.mark.parametrize(
    "batch, padded, start, queries",
    [(1, 0, 0, 6), (1, 0, 6, 1), (2, 3, 0, 7), (2, 3, 7, 1), (1, 0, 0, 8), (2, 0, 10, 1)],
    ids=["prefill", "decode", "padded-prefill", "padded-decode", "prefill-of-a-whole-bucket", "decode-that-grows"],
)
def test_the_growing_caches_masks_are_hfs(name, attention, batch, padded, start, queries):
    config = model(name).config
    config._attn_implementation = attention

    def masks(make):
        cache = GrowingStaticCache(config, 64, max_batch_size=batch, min_capacity=8)
        attention_mask = torch.ones(batch, start + queries, dtype=torch.long)
        attention_mask[-1, :padded] = 0
        return make(config, torch.empty(batch, queries), attention_mask, torch.arange(start, start + queries), cache)

    ours, hfs = masks(functools.partial(masks_for_generate, transformers.masking_utils.create_masks_for_generate)), masks(
        transformers.masking_utils.create_masks_for_generate
    )
    assert type(ours) is type(hfs)
    pairs = [(ours[k], hfs[k]) for k in hfs] if isinstance(hfs, dict) else [(ours, hfs)]
    assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in pairs)


@pytest.mark.executor_sets("defaults")  # nothing compiled
def test_a_position_past_the_limit_is_refused_before_anything_is_resized():
    cache = GrowingStaticCache(config=model("llama").config, max_batch_size=1, max_cache_len=16, min_capacity=4)
    cache.reserve(torch.arange(3))
    states = torch.ones(1, TINY["num_key_value_heads"], 3, TINY["hidden_size"] // TINY["num_attention_heads"])
    for i in range(len(cache.layers)):  # written as a forward writes (a layer of transformers 4.56 on is made so)
        cache.update(states, states, i, {"cache_position": torch.arange(3)})
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


def _replay_reasons(caplog) -> list[str]:
    return [m for m in map(logging.LogRecord.getMessage, caplog.records) if "calls of repeated blocks" in m]


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors; what is traced is the point
def test_the_growing_caches_write_assigns_no_attribute_and_compares_no_index_so_decoder_layers_are_replayed(
    caplog, monkeypatch
):
    """HF's ``StaticLayer.update`` assigns ``self.device`` at every traced call (thunder's ``Device`` is never a
    ``torch.device``); a call that assigns an attribute is never replayed. ``GrowingLayer.update`` leaves the check
    out where the devices agree. HF's ``Cache.update`` compares the layer's ``layer_idx`` with its number of layers
    (``append_new_layers``), which ``GrowingStaticCache`` makes with the cache; so a decoder layer's index only
    selects its cache layer, and the second layer replays the first, both calling one block program."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    eager = model("llama")

    def said() -> str:
        """The replay's log line of a compilation through the recipe, whose first token is eager's."""
        caplog.clear()
        compiled = thunder.compile(copy.deepcopy(eager), recipe=HFTransformersRecipe(), plugins="inplace")
        assert torch.equal(greedy(compiled, prompt(), 1).sequences, greedy(eager, prompt(), 1).sequences)
        (line,) = _replay_reasons(caplog)
        return line

    line = said()
    assert re.search(r": 1 interpreted \(\d+\.\d s\), 1 replayed \(\d+\.\d s\); compiled LlamaDecoderLayer once "
                     r"\(\d+\.\d s\), called 2 times$", line), line
    # broken on purpose: HF's own making of layers, which compares the index
    from thunder_ext.integrations.hf_transformers import Cache, GrowingLayer, GrowingStaticCache, StaticLayer

    with monkeypatch.context() as hf:
        hf.setattr(GrowingStaticCache, "append_new_layers", Cache.append_new_layers)
        line = said()
        assert "; 1 interpreted: attribute self_attn.layer_idx differs and is read, recorded;" in line, line
    # broken on purpose: HF's own update, with its check of the device
    monkeypatch.setattr(GrowingLayer, "update", StaticLayer.update)
    line = said()
    assert "assigns the attribute 'device' of an object it did not make" in line, line
