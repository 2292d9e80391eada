"""HF transformers' sparse mixture-of-experts blocks (Mixtral, Qwen3-MoE) under the extension: thunder 0.2.6 cannot
trace HF's routing (``aten.nonzero``), so the extension's compilations trace HF's expert loop as one operator where
nothing is differentiated, and an equal sum in static shapes where it is (``thunder_ext/integrations/hf_moe.py``).
Against eager, block by block: the outputs and router logits, a decode step that reads only the routed experts,
the gradients of a training step, an update of the experts' weights seen, under both executor sets; and the
refusals. The families' ``generate`` runs in tests/test_hf_families.py."""

import copy

import pytest
import thunder
import torch
from torch.testing import assert_close

import thunder_ext

transformers = pytest.importorskip("transformers")

BLOCKS = {
    "mixtral": ("MixtralConfig", "MixtralSparseMoeBlock", "mixtral", {"num_local_experts": 4}),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeSparseMoeBlock", "qwen3_moe", {"num_experts": 4, "moe_intermediate_size": 64}),
}  # fmt: skip


def block(family: str, **overrides) -> torch.nn.Module:
    config_class, block_class, module, experts = BLOCKS[family]
    config = getattr(transformers, config_class)(hidden_size=32, intermediate_size=64, num_experts_per_tok=2,
                                                 **experts, **overrides)  # fmt: skip
    modeling = getattr(transformers.models, module)
    torch.manual_seed(0)
    return getattr(getattr(modeling, f"modeling_{module}"), block_class)(config).eval()


def names_of_ops(jitted) -> list[str]:
    return [b.sym.name for b in thunder.last_traces(jitted)[-1].bound_symbols]


@pytest.mark.parametrize("family", BLOCKS)
def test_a_block_computes_eagers_outputs_and_router_logits_with_hfs_loop_as_one_operator(family, executor_set):
    moe = block(family)
    x = torch.randn(2, 5, 32)
    jitted = thunder_ext.jit(copy.deepcopy(moe))
    with torch.no_grad():
        got, expected = jitted(x), moe(x)
    # HF's own ops in HF's order: equal under thunder's defaults (Inductor's router softmax rounds otherwise)
    assert_close(got, expected, **({"rtol": 0, "atol": 0} if executor_set == "defaults" else {}))
    assert "hf_moe_routed_experts" in names_of_ops(jitted)


@pytest.mark.parametrize("family", BLOCKS)
def test_a_decode_step_reads_only_the_experts_routed_to_its_token(family):
    # an expert the token is not routed to holds NaN weights: eager never reads them, nor may the extension (the
    # dense form would: NaN times a zero routing weight is NaN)
    moe = block(family)
    x = torch.randn(1, 1, 32)
    with torch.no_grad():
        routed = set(torch.topk(moe.gate(x.view(-1, 32)), 2).indices.flatten().tolist())
        unrouted = next(e for e in range(4) if e not in routed)
        for p in moe.experts[unrouted].parameters():
            p.fill_(float("nan"))
        got, expected = thunder_ext.jit(copy.deepcopy(moe))(x), moe(x)
    assert not got[0].isnan().any()
    assert_close(got, expected)


@pytest.mark.parametrize("family", BLOCKS)
def test_a_training_step_through_a_block_gets_eagers_gradients(family):
    moe = block(family).train()
    twin = copy.deepcopy(moe)
    x = torch.randn(2, 5, 32, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_(True)
    for m, inp in ((moe, x), (thunder_ext.jit(twin), x_twin)):
        out, router_logits = m(inp)
        (out.square().sum() + router_logits.logsumexp(-1).sum()).backward()
    assert_close(x_twin.grad, x.grad)
    grads = dict(moe.named_parameters())
    for name, p in twin.named_parameters():
        assert_close(p.grad, grads[name].grad, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("family", BLOCKS)
def test_an_update_of_the_experts_weights_is_seen_at_the_next_call(family):
    moe = block(family)
    jitted = thunder_ext.jit(copy.deepcopy(moe))
    x = torch.randn(1, 6, 32)
    with torch.no_grad():
        jitted(x)
    for m in (moe, jitted):  # an optimizer's step on the experts: their parameters written in place
        experts = [p for name, p in m.named_parameters() if "experts." in name]
        for p in experts:
            p.grad = torch.full_like(p, 0.05)
        torch.optim.SGD(experts, lr=1.0).step()
    with torch.no_grad():
        assert_close(jitted(x), moe(x))


@pytest.mark.executor_sets("defaults")  # fails while tracing
def test_stock_thunder_still_cannot_trace_hfs_routing():
    thunder_ext.jit(block("mixtral"))(torch.randn(1, 2, 32))  # the substitute is registered: transformers is imported
    with pytest.raises(Exception, match="nonzero"):
        thunder.jit(block("mixtral"))(torch.randn(1, 2, 32))


@pytest.mark.executor_sets("defaults")  # refused while tracing
def test_an_activation_with_options_and_the_router_jitter_are_refused():
    with torch.no_grad(), pytest.raises(NotImplementedError, match="activation GELUActivation is not one of"):
        thunder_ext.jit(block("mixtral", hidden_act="gelu"))(torch.randn(1, 2, 32))
    with pytest.raises(NotImplementedError, match="router jitter .* set router_jitter_noise=0"):
        thunder_ext.jit(block("mixtral", router_jitter_noise=0.1).train())(torch.randn(1, 2, 32))
