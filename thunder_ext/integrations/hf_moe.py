"""HF transformers' sparse mixture-of-experts blocks (Mixtral, Qwen3-MoE) under the extension's compilations.

HF's blocks route each token with ``nonzero`` and ``torch.where(mask)``, whose results' shapes depend on the routing:
thunder 0.2.6's interpreter cannot trace them (``aten.nonzero``'s output shape), stock ``thunder.jit`` and
``thunder.compile`` with thunder's HF recipe neither. As for litgpt's (``litgpt_moe.py``), the interpreter traces one
of two forms instead, in the extension's compilations only (``thunder026/substitutes.py``):

- **Nothing differentiated** (``routed``: every ``generate`` step): the router as HF computes it, then HF's loop over
  the experts as one operator of thunder's PyTorch executor (``hf_moe_routed_experts``), whose output has the input's
  shape while inside it runs HF's code: each expert hit, in HF's order, on the tokens routed to it, added with
  ``index_add_``, so a step reads only the routed experts' weights, with eager's results. The operator reads the
  experts' weights as the prologue passes them: no packed copy to keep in sync.
- **Differentiated** (``routed_densely``): every expert on every token, times each token's routing weight for it
  (zero where not routed), which thunder's autodiff differentiates; ``num_experts / top_k`` times the routed work.

A block is known by its class (``BLOCKS``: the experts' projection names and whether the top weights are
normalized), so another HF block of this form is one entry. Mixtral's router jitter (training only) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch
import torch.nn.functional as F
from thunder.core.proxies import TensorProxy
from thunder.executors.torchex import ex as torch_ex


@dataclass(frozen=True)
class Block:
    """How one HF block class names its experts' projections (act(gate(x)) * up(x), then down), and whether it
    normalizes the top ``k`` routing weights always (``None``) or by ``config.norm_topk_prob`` (the attribute)."""

    gate: str
    up: str
    down: str
    normalized_by: str | None


# module of transformers -> (block class, how it names things)
BLOCKS = {
    "transformers.models.mixtral.modeling_mixtral": ("MixtralSparseMoeBlock", Block("w1", "w3", "w2", None)),
    "transformers.models.qwen3_moe.modeling_qwen3_moe": (
        "Qwen3MoeSparseMoeBlock", Block("gate_proj", "up_proj", "down_proj", "norm_topk_prob"),
    ),
}  # fmt: skip


def _router(self, block: Block, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """HF's router (transformers 4.55.4): the logits, each token's top weights and their experts, ``x`` (tokens, C)."""
    if self.training and getattr(self, "jitter_noise", 0) > 0:
        raise NotImplementedError(
            f"thunder_ext: {type(self).__name__}'s router jitter (training with router_jitter_noise > 0) draws random "
            "noise that the extension's traced form of the block does not; set router_jitter_noise=0"
        )
    router_logits = self.gate(x)
    weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    weights, experts = torch.topk(weights, self.top_k, dim=-1)
    if block.normalized_by is None or getattr(self, block.normalized_by):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return router_logits, weights.to(x.dtype), experts


# activation class -> its name in transformers' ACT2FN, for the classes that take no options there (the operator
# is given a name, which a trace holds as a constant); filled by ``substitute_in``
_ACTIVATIONS: dict[type, str] = {}


def _activation_name(act: torch.nn.Module) -> str:
    if (name := _ACTIVATIONS.get(type(act))) is None:
        raise NotImplementedError(
            f"thunder_ext: the experts' activation {type(act).__name__} is not one of transformers' ACT2FN without "
            f"options ({', '.join(sorted(_ACTIVATIONS.values()))}); the routed form of the block runs those only"
        )
    return name


def _projections(self, block: Block) -> list[list[torch.Tensor]]:
    return [[getattr(expert, name).weight for expert in self.experts] for name in (block.gate, block.up, block.down)]


def _forms(block: Block):
    def routed(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's forward where nothing is differentiated: HF's loop over the experts as one operator."""
        b, t, c = hidden_states.shape
        x = hidden_states.view(-1, c)
        router_logits, weights, experts = _router(self, block, x)
        act = _activation_name(self.experts[0].act_fn)
        y = routed_experts_op(x, weights, experts, act, *_projections(self, block))
        return y.reshape(b, t, c), router_logits

    def routed_densely(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's forward with static shapes: every expert on every token, weighted by its routing weight."""
        b, t, c = hidden_states.shape
        x = hidden_states.view(-1, c)
        router_logits, weights, experts = _router(self, block, x)
        routed = experts.unsqueeze(-1) == torch.arange(len(self.experts), device=x.device)  # (tokens, k, experts)
        per_expert = (weights.unsqueeze(-1) * routed).sum(dim=1)  # (tokens, experts): zero where not routed
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            y = y + per_expert[:, e, None] * expert(x)
        return y.reshape(b, t, c), router_logits

    return routed, routed_densely


def routed_experts(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, act: str, gate: list[torch.Tensor],
                   up: list[torch.Tensor], down: list[torch.Tensor]) -> torch.Tensor:  # fmt: skip
    """HF's loop over the experts (``MixtralSparseMoeBlock.forward``, transformers 4.55.4), each a bias-free MLP
    ``down(act(gate(x)) * up(x))``, on the tokens routed to it: what ``routed_experts_op`` runs."""
    from transformers.activations import ACT2FN

    act_fn = ACT2FN[act]
    y = torch.zeros_like(x)
    mask = F.one_hot(experts, num_classes=len(gate)).permute(2, 1, 0)
    for (e,) in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero().tolist():
        idx, top_x = torch.where(mask[e])
        tokens = x[top_x]
        out = F.linear(act_fn(F.linear(tokens, gate[e])) * F.linear(tokens, up[e]), down[e]) * weights[top_x, idx, None]
        y.index_add_(0, top_x, out.to(x.dtype))
    return y


# An op of thunder's PyTorch executor: among the executors of every compilation, and of a later process's (the
# compile cache names it by executor and name).
routed_experts_op = torch_ex.register_operator(
    "hf_moe_routed_experts", meta=lambda x, *args: TensorProxy(like=x), fn=routed_experts
)


def substitute_in(module: ModuleType) -> None:
    """Register the two forms for the forward of ``module``'s block class (``BLOCKS``)."""
    from transformers.activations import ACT2CLS

    from thunder_ext.thunder026.substitutes import interpret_instead

    with_options = {c[0] for c in ACT2CLS.values() if isinstance(c, tuple)}
    for act, cls in ACT2CLS.items():
        if isinstance(cls, type) and cls not in with_options and not issubclass(cls, torch.nn.PReLU):
            _ACTIVATIONS.setdefault(cls, act)
    name, block = BLOCKS[module.__name__]
    routed, routed_densely = _forms(block)
    interpret_instead(getattr(module, name).forward, routed, differentiated=routed_densely)
