"""Every litgpt model family through litgpt's own ``generate`` with ``thunder_ext.set_kv_cache``'s growing cache.

A family is the set of litgpt's configs that agree on every switch that changes the traced program (``FAMILY``:
the MLP and norm classes, the residual's form, multi-head, grouped or multi-query attention, sliding windows on
all layers or some, softcapping, partial rotary, qk norm, post norms, biases, rope adjustments, experts, shared
experts, latent attention). The
families are computed from litgpt's configs when the tests are collected, so a family a new litgpt adds runs here
without an edit, and one that breaks is a failing test. Each is run by its first config, shrunk: 2 layers (3 where
some layers slide: sliding, global, sliding), 64 wide, windows of 16 positions, 4 experts of which 2 per token.

CI runs, under each executor set, the few families that together turn every switch each way (``covering``: 7 of
22); ``THUNDER_EXT_ALL_FAMILIES=1`` runs every family under every set (docs/model_families.md records such runs).

The reference is eager litgpt's ``generate`` on the same weights, with litgpt's cache sliced to
``input_pos_maxp1``, as its users run it; for softcapped attention it is the causal definition (litgpt's forward
without a cache), which litgpt's cached path does not compute (README, Limits), and a token may differ from it only
in a near tie (the issue's allowance: its logit within 1e-4 of the best), after which the sequences part.
"""

import copy
import dataclasses
import os

import pytest
import thunder
import torch
from helpers import VOCAB, caches, covering
from torch.testing import assert_close

import thunder_ext

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")
from litgpt.generate.base import generate  # noqa: E402

# a prompt prefilled at 16 positions, a growth to 32 while decoding, windows that wrap
PROMPT, RETURNED, LIMIT, MIN_CAPACITY, WINDOW = 12, 30, 32, 16, 16
NEAR_TIE = 1e-4


def attention(config: litgpt.Config) -> str:
    if config.n_query_groups == config.n_head:
        return "multi-head"
    return "multi-query" if config.n_query_groups == 1 else "grouped-query"


def sliding(config: litgpt.Config) -> str:
    if config.sliding_window_size is None:
        return "none"
    return "all" if all(config.sliding_window_indices) else "some"


# The switches that change the traced program, each named as a family's id shows it.
FAMILY = {
    "mlp": lambda c: c.mlp_class_name,
    "norm": lambda c: c.norm_class_name,
    "parallel": lambda c: c.parallel_residual,
    "shared_norm": lambda c: c.shared_attention_norm,
    "attention": attention,
    "sliding": sliding,
    "softcap": lambda c: c.attention_logit_softcapping is not None,
    "final_softcap": lambda c: c.final_logit_softcapping is not None,
    "partial_rotary": lambda c: c.rotary_percentage < 1,
    "qk_norm": lambda c: c.norm_qk,
    "post_attention_norm": lambda c: c.post_attention_norm,
    "post_mlp_norm": lambda c: c.post_mlp_norm,
    "bias": lambda c: c.bias,
    "attn_bias": lambda c: c.attn_bias,
    "rope_adjustments": lambda c: c.rope_adjustments is not None,
    "experts": lambda c: c.n_expert > 0,
    "shared_experts": lambda c: bool(c.n_shared_expert),
    "latent_attention": lambda c: c.latent_attention is not None,
}


def switches(config: litgpt.Config) -> tuple:
    return tuple(switch(config) for switch in FAMILY.values())


def families() -> dict[tuple, str]:
    """Each family's switches, and the name of its first config in litgpt's list."""
    found: dict[tuple, str] = {}
    for entry in litgpt.config.configs:
        config = litgpt.Config(**entry)
        found.setdefault(switches(config), config.name)
    return found


def family_id(switches: tuple) -> str:
    differs = [name if value is True else f"{name}={value}" for name, value in zip(FAMILY, switches) if value]
    return "-".join(str(d) for d in differs)


def shrunk(name: str) -> litgpt.Config:
    """``name``'s config, small enough for a CPU test; every switch of its family kept."""
    config = litgpt.Config.from_name(name)
    heads = {"multi-head": 4, "grouped-query": 2, "multi-query": 1}[attention(config)]
    layers = {"none": None, "all": [1, 1], "some": [1, 0, 1]}[sliding(config)]
    overrides = dict(
        n_layer=len(layers) if layers else 2, n_embd=64, n_head=4, head_size=16, n_query_groups=heads,
        intermediate_size=128, vocab_size=VOCAB, padded_vocab_size=VOCAB, block_size=64,
    )  # fmt: skip
    if layers:
        overrides.update(sliding_window_size=WINDOW, sliding_window_indices=layers)
        if config.rope_indices is not None:  # the local rope goes with the sliding layers, as in the full config
            overrides.update(rope_indices=layers)
    if config.n_expert:
        overrides.update(n_expert=4, n_expert_per_token=2)
        if config.moe_intermediate_size:
            overrides.update(moe_intermediate_size=64)
    shrunk = dataclasses.replace(config, **overrides)
    assert switches(shrunk) == switches(config)
    return shrunk


FAMILIES = families()


# CI time (15-30 s a family under thunder's defaults, up to 90 s under Inductor): the families that together turn
# every switch each way; THUNDER_EXT_ALL_FAMILIES=1 runs every family
RUN = set(FAMILIES.values()) if os.environ.get("THUNDER_EXT_ALL_FAMILIES") else covering(FAMILIES)


def test_litgpt_has_the_families_these_tests_were_written_for():
    # litgpt 0.5.13's 210 configs fall into 22 families; another count means litgpt changed, and the families
    # below changed with it (a new one runs as it is; this says so)
    assert len(FAMILIES) == 22, sorted(FAMILIES.values())


@pytest.mark.parametrize("name", [n for n in FAMILIES.values() if n in RUN],
                         ids=[family_id(s) for s, n in FAMILIES.items() if n in RUN])  # fmt: skip
def test_a_familys_generate_with_a_growing_cache_gives_eagers_tokens_and_writes_in_place(name):
    check_family(name)


def check_family(name: str, *, device: str = "cpu", executors: list | None = None) -> None:
    """The test above on ``device`` (tests/test_gpu.py runs it on CUDA), jitted with ``executors``; on a GPU the
    logits within 1e-4 (its kernels sum in other orders than eager's, as tests/test_gpu.py's ``Pair`` allows)."""
    torch.manual_seed(0)
    config = shrunk(name)
    eager = litgpt.GPT(config).eval().to(device)
    jitted = thunder_ext.jit(copy.deepcopy(eager), executors=executors, strict=True)  # a write left a copy raises
    eager.set_kv_cache(batch_size=1, max_seq_length=LIMIT, device=torch.device(device))
    thunder_ext.set_kv_cache(jitted, batch_size=1, max_seq_length=LIMIT, min_capacity=MIN_CAPACITY,
                             device=torch.device(device))  # fmt: skip
    prompt = torch.randint(0, VOCAB, (PROMPT,), generator=torch.Generator().manual_seed(1)).to(device)
    got = generate(jitted, prompt, RETURNED, temperature=0.0)
    if config.attention_logit_softcapping is None:
        assert torch.equal(got, generate(eager, prompt, RETURNED, temperature=0.0))
    else:
        assert_causal_reference_tokens(eager, got)
    assert not [d for d in thunder_ext.inplace_decisions(jitted) if d.how == "copy"]
    held = [t.shape[2] for t in caches(jitted._model)]
    slides = [bool(config.sliding_window_size and config.sliding_window_indices[i]) for i in range(config.n_layer)]
    assert held == [WINDOW if s else LIMIT for s in slides for _ in "kv"], held  # grown from 16; windows at theirs
    # the same calls again, teacher-forced: every position's logits are the causal definition's (tokens alone can
    # hide a wrong attention), and a new sequence compiles nothing
    misses = thunder.cache_misses(jitted)
    tolerance = {} if device == "cpu" else dict(rtol=1e-4, atol=1e-4)
    assert_close(teacher_forced(jitted, got), reference_logits(eager, got), **tolerance)
    assert thunder.cache_misses(jitted) == misses


@torch.inference_mode()
def teacher_forced(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The logits of every position but the last, as ``generate`` calls the model: the prompt, then each token."""
    device = tokens.device
    logits = [model(tokens[None, :PROMPT], torch.arange(PROMPT, device=device))]
    logits += [model(tokens[None, p : p + 1], torch.tensor([p], device=device)) for p in range(PROMPT, len(tokens) - 1)]
    return torch.cat(logits, dim=1)


@torch.inference_mode()
def reference_logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """litgpt's forward without a cache, which builds its own causal (and sliding) mask."""
    return model(tokens[None, :-1])


@torch.inference_mode()
def assert_causal_reference_tokens(model: torch.nn.Module, got: torch.Tensor) -> None:
    """``got``'s generated tokens are those the causal definition chooses, but in a near tie."""
    for p in range(PROMPT, RETURNED):
        logits = model(got[None, :p])[0, -1]
        if got[p] != logits.argmax():
            assert logits.max() - logits[got[p]] <= NEAR_TIE, f"position {p}: {got[p]} is not the reference's"
            return  # the sequences part at a near tie
