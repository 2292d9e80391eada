"""litgpt's KV cache under thunder_ext.jit: the variants of thunder's own kv-cache test, prefill then decode."""

import copy

import pytest
import torch
from torch.testing import assert_close

import thunder_ext

litgpt_model = pytest.importorskip("litgpt.model", reason="litgpt is not installed (pip install '.[test]')")
from thunder.tests.litgpt_model import Config  # noqa: E402  (thunder ships litgpt's test configs)

VARIANTS = ["llama1-like", "long-context-like", "llama2-like", "codellama2-like", "gpt-neox-like"]


def make_model(name: str, max_seq_length: int = 8) -> torch.nn.Module:
    torch.manual_seed(0)
    model = litgpt_model.GPT(Config.from_name(name))
    model.max_seq_length = max_seq_length
    model.requires_grad_(False)
    return model.eval()


def caches(model):
    return [t for block in model.transformer.h for t in (block.attn.kv_cache.k, block.attn.kv_cache.v)]


@pytest.mark.parametrize("name", VARIANTS)
def test_prefill_then_decode_matches_eager(name):
    eager = make_model(name)
    jitted = copy.deepcopy(eager)
    prompt = torch.randint(0, 200, (1, 3))

    # Reference without any cache: full forward passes over the growing sequence.
    tokens = prompt
    reference = []
    for _ in range(3):
        logits = eager(tokens)
        reference.append(logits[:, -1])
        tokens = torch.cat((tokens, logits[:, -1].argmax(-1, keepdim=True)), dim=-1)

    eager.set_kv_cache(batch_size=1)
    jitted.set_kv_cache(batch_size=1)
    jm = thunder_ext.jit(jitted)
    pointers = [t.data_ptr() for t in caches(jitted)]

    pos = torch.arange(prompt.shape[1])
    x = prompt
    for step in range(3):
        got, want = jm(x, pos), eager(x, pos)
        assert_close(got, want)
        assert_close(got[:, -1], reference[step], rtol=1e-4, atol=1e-4)
        for a, b in zip(caches(jitted), caches(eager)):
            assert_close(a, b)
        x = got[:, -1].argmax(-1, keepdim=True)
        pos = pos[-1:] + 1

    assert [t.data_ptr() for t in caches(jitted)] == pointers
    decisions = thunder_ext.inplace_decisions(jm)
    assert len(decisions) == 2 * len(jitted.transformer.h)
    assert all(d.how != "copy" for d in decisions), [str(d) for d in decisions]
