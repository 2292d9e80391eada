"""litgpt's mixture of experts (``LLaMAMoE``) under the extension: thunder 0.2.6 cannot trace litgpt's routing
(``torch.where(mask)``), so the extension's compilations trace litgpt's expert loop as one operator where nothing is
differentiated, and an equal sum in static shapes where it is (``thunder_ext/integrations/litgpt_moe.py``). Against
eager: the logits of a forward, the gradients of a training step, litgpt's ``generate`` with the growing cache, a
decode step that reads only the routed experts, and an update of the experts' weights seen, under both executor
sets; stock ``thunder.jit`` keeps failing as before."""

import copy

import pytest
import thunder
import torch
from torch.testing import assert_close

import thunder_ext
from helpers import VOCAB

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")
from litgpt.generate.base import generate  # noqa: E402

from thunder_ext.integrations.litgpt_moe import routed_densely  # noqa: E402


def mixtral_like(**overrides) -> torch.nn.Module:
    """Mixtral's litgpt config shrunk: a layer of 4 experts, 2 routed per token."""
    config = litgpt.Config.from_name(
        "Mixtral-8x7B-v0.1", n_layer=1, n_embd=64, n_head=4, n_query_groups=2, head_size=16, intermediate_size=128,
        vocab_size=VOCAB, padded_vocab_size=VOCAB, block_size=64, n_expert=4, n_expert_per_token=2, **overrides,
    )  # fmt: skip
    torch.manual_seed(0)
    return litgpt.GPT(config).eval()


@pytest.mark.executor_sets("defaults")  # CI time: the torch.compile executor's logits are checked by the tests below
def test_a_mixture_of_experts_computes_litgpt_s_logits():
    model = mixtral_like(n_shared_expert=1, moe_intermediate_size=128)  # routed experts and a shared one
    tokens = torch.randint(0, VOCAB, (2, 9))
    with torch.no_grad():
        assert_close(thunder_ext.jit(copy.deepcopy(model))(tokens), model(tokens))


def test_a_mixture_of_experts_generates_eager_s_tokens_with_a_growing_cache():
    model = mixtral_like()
    model.max_seq_length = 64
    jitted = thunder_ext.jit(copy.deepcopy(model))
    thunder_ext.set_kv_cache(jitted, batch_size=1, min_capacity=8)
    model.set_kv_cache(batch_size=1)
    prompt = torch.randint(0, VOCAB, (5,))
    expected = generate(model, prompt, 12, temperature=0.0)  # 7 new tokens: the cache grows from 8 to 16
    assert torch.equal(generate(jitted, prompt, 12, temperature=0.0), expected)
    assert all(d.how != "copy" for d in thunder_ext.inplace_decisions(jitted)), thunder_ext.inplace_decisions(jitted)


@pytest.mark.executor_sets("defaults")  # fails while tracing
def test_stock_thunder_still_traces_litgpt_s_routing():
    # the substitute acts in the extension's compilations only, even once registered in this process
    thunder_ext.jit(mixtral_like())  # registers it: litgpt is imported
    with pytest.raises(NotImplementedError, match=r"torch.where\(\) does not support only specifying a condition"):
        thunder.jit(mixtral_like())(torch.zeros(1, 2, dtype=torch.long))


@pytest.mark.executor_sets("defaults")  # no compilation
def test_the_substitute_is_litgpt_s_moe_in_eager_too():
    # what the extension traces, run eagerly, is litgpt's module's result (the sum is the same; see the module)
    moe = mixtral_like(n_shared_expert=1, moe_intermediate_size=128).transformer.h[0].mlp
    x = torch.randn(3, 5, 64)
    with torch.no_grad():
        assert_close(routed_densely(moe, x), moe(x))


def test_a_training_step_through_a_mixture_of_experts_gets_eager_s_gradients():
    model = mixtral_like(n_shared_expert=1, moe_intermediate_size=128).train()
    jitted_model = copy.deepcopy(model)
    tokens = torch.randint(0, VOCAB, (2, 6))
    model(tokens).logsumexp(-1).sum().backward()
    thunder_ext.jit(jitted_model)(tokens).logsumexp(-1).sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    for name, p in jitted_model.named_parameters():
        assert_close(p.grad, grads[name], msg=lambda m, name=name: f"{name}: {m}")


def moe_input(model: torch.nn.Module, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """What the first layer's mixture of experts is given for ``tokens`` (an eager call, its cache then reset)."""
    seen = []
    hook = model.transformer.h[0].mlp.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.inference_mode():
        model(tokens, positions, input_pos_maxp1=int(positions[-1]) + 1)
    hook.remove()
    model.set_kv_cache(batch_size=1)
    return seen[0]


def test_a_decode_step_reads_only_the_experts_routed_to_its_token():
    # an expert no token is routed to holds NaN weights: eager never reads them, nor may the extension (the dense
    # form would: NaN times a zero routing weight is NaN)
    model = mixtral_like()
    model.max_seq_length = 16
    model.set_kv_cache(batch_size=1)
    prompt, token = torch.randint(0, VOCAB, (1, 4)), torch.randint(0, VOCAB, (1, 1))
    moe = model.transformer.h[0].mlp
    x = moe_input(model, torch.cat((prompt, token), dim=1), torch.arange(5))
    with torch.no_grad():
        routed = set(torch.topk(moe.gate(x.view(-1, x.shape[-1])), 2).indices.flatten().tolist())
        unrouted = next(e for e in range(4) if e not in routed)
        moe.experts[unrouted].fc_1.weight.fill_(float("nan"))
    jitted = thunder_ext.jit(copy.deepcopy(model))
    thunder_ext.set_kv_cache(jitted, batch_size=1, min_capacity=8)
    with torch.inference_mode():
        prompt_logits = jitted(prompt, torch.arange(4))
        logits = jitted(token, torch.tensor([4]))
        assert_close(prompt_logits, model(prompt, torch.arange(4), input_pos_maxp1=4))
        assert_close(logits, model(token, torch.tensor([4]), input_pos_maxp1=5))
    assert not logits.isnan().any()


def test_an_update_of_the_experts_weights_is_seen_at_the_next_call():
    model = mixtral_like()
    jitted = thunder_ext.jit(copy.deepcopy(model))
    tokens = torch.randint(0, VOCAB, (1, 6))
    with torch.inference_mode():
        jitted(tokens)
    for m in (model, jitted):  # an optimizer's step on the experts: their parameters written in place
        experts = [p for name, p in m.named_parameters() if ".experts." in name]
        for p in experts:
            p.grad = torch.full_like(p, 0.05)
        torch.optim.SGD(experts, lr=1.0).step()
    with torch.inference_mode():
        assert_close(jitted(tokens), model(tokens))
