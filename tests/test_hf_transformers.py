"""HF transformers' StaticCache, written in place through thunder's "hf-transformers" recipe with the plugin,
and through ``thunder_ext.thunderfx``.

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
