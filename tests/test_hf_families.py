"""HF transformers' model families through ``generate()`` with its default cache, at both entry points that replace
it by ``thunder_ext.GrowingStaticCache``: ``thunderfx`` on the forward, and ``thunder.compile`` with
``thunder_ext.HFTransformersRecipe()`` and the plugin. Tokens equal eager's (HF's ``DynamicCache``), every cache
write in place, and the cache passed back into a second ``generate`` (HF's multi-turn use) goes on from where the
first left off, as eager's does.

Tiny random configs of each family: 64 wide, 4 heads of 16 with 2 key-value heads, 3 layers, windows of 8
positions where the family slides (Gemma-2 and Gemma-3 mix sliding and global layers: here sliding, global,
sliding), 4 experts of which 2 per token; a 12-token prompt, longer than a window (its tokens' mask is the window's
too), then 21 new tokens, so a window wraps; the global layers hold the smallest bucket, capped at the model's 64
positions. The second turn passes the first's sequence and cache back into ``generate`` for 10 more tokens: it goes
on at position 33 only where the cache counts the 32 positions written, not the 8 slots of a wrapped window (HF
would then run positions 8 to 32 again). Nothing is added to the sequence, so the turn runs the step compiled for
the first: a prompt of more tokens would compile a shape more, at every family and entry point.

CI runs every family through ``thunderfx``, and through the recipe Llama and the families that together take every
value of ``switches`` (4 of 11); ``THUNDER_EXT_ALL_FAMILIES=1`` runs every family at both entry points.
"""

from __future__ import annotations

import copy
import os

import pytest
import thunder
import torch

import thunder_ext
from helpers import covering

transformers = pytest.importorskip("transformers")

from thunder_ext.integrations.hf_transformers import GrowingStaticCache, HFTransformersRecipe  # noqa: E402

WIDTH = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             vocab_size=128, max_position_embeddings=64, num_hidden_layers=3, pad_token_id=0)  # fmt: skip
WINDOW, PROMPT, NEW_TOKENS, SECOND_TOKENS = 8, 12, 21, 10
SLIDING = ["sliding_attention", "full_attention", "sliding_attention"]
SLIDING_WINDOWS = {"sliding_window": WINDOW, "layer_types": SLIDING}
EXPERTS = {"num_local_experts": 4, "num_experts_per_tok": 2}

FAMILIES = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", {}),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", {}),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", {}),
    "gemma": ("GemmaForCausalLM", "GemmaConfig", {}),
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config", SLIDING_WINDOWS),
    # Gemma-2 as HF advises running it: eager attention, which takes the mask as 0 and the dtype's least value
    "gemma2_eager": ("Gemma2ForCausalLM", "Gemma2Config", {**SLIDING_WINDOWS, "attn_implementation": "eager"}),
    "gemma3": ("Gemma3ForCausalLM", "Gemma3TextConfig", SLIDING_WINDOWS),
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(sliding_window=WINDOW)),
    "phi3": ("Phi3ForCausalLM", "Phi3Config", {}),
    "mixtral": ("MixtralForCausalLM", "MixtralConfig", EXPERTS),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", {"num_experts": 4, "num_experts_per_tok": 2,
                                                            "moe_intermediate_size": 64}),
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # each test compiles as a program of its own would (tests/test_hf_transformers.py)


def model(family: str) -> torch.nn.Module:
    model_class, config_class, extra = FAMILIES[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**WIDTH, **extra)
    return getattr(transformers, model_class)(config).eval()


def greedy(m: torch.nn.Module, ids: torch.Tensor, new_tokens: int = NEW_TOKENS, **kwargs):
    with torch.no_grad():
        # every token generated (a random model may pick its end token early): the windows wrap
        return m.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                          return_dict_in_generate=True, **kwargs)  # fmt: skip


def second_turn(m: torch.nn.Module, first):
    """HF's multi-turn use: the first turn's sequence and its cache passed back."""
    return greedy(m, first.sequences, SECOND_TOKENS, past_key_values=first.past_key_values)


def thunderfx(m: torch.nn.Module):
    m.forward = thunder_ext.thunderfx(m.forward)
    return m, m.forward


def recipe(m: torch.nn.Module):
    compiled = thunder.compile(m, recipe=HFTransformersRecipe(), plugins="inplace")
    return compiled, compiled


ENTRY_POINTS = {"thunderfx": thunderfx, "recipe": recipe}


def switches(family: str) -> tuple:
    """What of a family's config changes the recipe's compilation beyond its modeling code: the cache's layers
    (global, sliding, or both), the attention's implementation, experts."""
    extra = FAMILIES[family][2]
    layers = "some" if "layer_types" in extra else "all" if "sliding_window" in extra else "none"
    experts = any("experts" in key for key in extra)
    return layers, extra.get("attn_implementation", "sdpa"), experts


# CI time (the recipe's Inductor regions: 45-90 s a family): thunderfx runs every family, the recipe Llama and the
# families that together take every switch's values (of families alike, the table's first: hence reversed);
# THUNDER_EXT_ALL_FAMILIES=1 runs every family at both
RECIPE_FAMILIES = (set(FAMILIES) if os.environ.get("THUNDER_EXT_ALL_FAMILIES")
                   else {"llama"} | covering({switches(f): f for f in reversed(FAMILIES)}))  # fmt: skip
ALL_CASES = [(family, entry) for family in FAMILIES for entry in ENTRY_POINTS]  # tests/test_gpu.py runs them all
CASES = [(family, entry) for family, entry in ALL_CASES if entry != "recipe" or family in RECIPE_FAMILIES]


@pytest.mark.executor_sets("defaults")  # each entry point picks its executors: thunderfx thunder's, the recipe its own
@pytest.mark.parametrize("family, entry", CASES)
def test_a_familys_generate_with_its_default_cache_gives_eagers_tokens_and_writes_in_place(family, entry):
    check_family(family, entry)


def check_family(family: str, entry: str, *, device: str = "cpu") -> None:
    """The test above on ``device`` (tests/test_gpu.py runs it on CUDA). On a GPU, whose kernels sum in other
    orders than eager's, the sequences may part at a near tie of eager's own logits (``assert_eagers_but_near_ties``)."""
    eager = model(family).to(device)
    ids = torch.randint(0, WIDTH["vocab_size"], (1, PROMPT), generator=torch.Generator().manual_seed(1)).to(device)
    expected = greedy(eager, ids)
    generating, compiled = ENTRY_POINTS[entry](copy.deepcopy(eager))
    out = greedy(generating, ids)
    if device == "cpu":
        assert torch.equal(out.sequences, expected.sequences)
    else:
        assert_eagers_but_near_ties(eager, out.sequences, expected.sequences)
    cache = out.past_key_values
    assert cache.get_seq_length() == PROMPT + NEW_TOKENS - 1  # the last token is returned, not written
    expected, out = second_turn(eager, expected), second_turn(generating, out)
    if device == "cpu":
        assert torch.equal(out.sequences, expected.sequences)
    else:
        assert_eagers_but_near_ties(eager, out.sequences, expected.sequences)
    assert out.past_key_values is cache
    if entry == "recipe":  # a compilation per shape (the prompt, a step), none per token or turn
        assert thunder.cache_misses(compiled) == 2, thunder.cache_misses(compiled)
    assert isinstance(cache, GrowingStaticCache)
    writes = [d for d in thunder_ext.inplace_decisions(compiled) if ".index_copy_(2, " in d.source]
    assert writes and all(d.how != "copy" for d in writes), writes
    extra = FAMILIES[family][2]  # the layers' kinds as the table gives them: every layer sliding where none are named
    layers = WIDTH["num_hidden_layers"]
    kinds = extra.get("layer_types") or ["sliding_attention" if "sliding_window" in extra else "full_attention"] * layers
    assert [layer.capacity for layer in cache.layers] == [WINDOW if k == "sliding_attention" else 64 for k in kinds]


NEAR_TIE = 1e-4  # tests/test_litgpt_families.py's allowance


@torch.no_grad()
def assert_eagers_but_near_ties(eager: torch.nn.Module, got: torch.Tensor, expected: torch.Tensor) -> None:
    """``got`` is eager's sequence up to a token whose logit, by eager's forward of ``got``'s prefix, is within
    ``NEAR_TIE`` of the best; the sequences part there."""
    differs = (got != expected)[0].nonzero()
    if len(differs) == 0:
        return
    p = int(differs[0])
    logits = eager(got[:, :p]).logits[0, -1]
    gap = float(logits.max() - logits[got[0, p]])
    assert gap <= NEAR_TIE, f"position {p}: token {int(got[0, p])} is {gap:.3g} below eager's best"
