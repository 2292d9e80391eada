"""litgpt's mixture of experts (``LLaMAMoE``: Mixtral, Qwen3-MoE, DeepSeek's routed experts) under the extension.

litgpt routes each token with ``torch.where(mask)``, whose result's shape depends on the routing: thunder 0.2.6
cannot trace it ("torch.where() does not support only specifying a condition"), stock ``thunder.jit`` neither. In
the extension's compilations the interpreter traces one of two forms instead (``thunder026/substitutes.py``):

- **Nothing differentiated** (``routed``: a decode step, any call under ``no_grad`` or ``inference_mode``): the
  router as litgpt computes it, then litgpt's loop over the experts as one operator of thunder's PyTorch executor
  (``routed_experts``), whose output has the input's shape while what it runs inside follows the routing: each
  expert on the tokens routed to it, so a decode step reads only the routed experts' weights, as eager does, with
  eager's operations in eager's order (equal results). No packed copy of the weights: the operator reads the
  experts' parameters as the prologue passes them, so an optimizer step on them is seen at the next call.
- **Differentiated** (``routed_densely``: a training step): the same sum in shapes that do not depend on the
  values, which thunder's autodiff differentiates: every expert runs on every token, and a token's output adds
  each expert's result times that token's routing weight for it, which is zero for the experts not routed to it
  (a finite result times 0.0); the experts routed to a token are added in litgpt's order, with litgpt's weights.
  It costs ``n_expert / n_expert_per_token`` times the routed experts' work (4x for Mixtral).

Experts with biases (``config.bias``) take the dense form everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch
import torch.nn.functional as F
from thunder.core.proxies import TensorProxy
from thunder.executors.torchex import ex as torch_ex


def _router(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's routing probabilities and experts (``LLaMAMoE.forward``, litgpt 0.5.13), ``x`` (B*T, C)."""
    if not self.config.n_expert_groups:
        router = self.gate(x)  # (B*T, n_expert)
        probs, indices = torch.topk(router, self.config.n_expert_per_token)  # (B*T, n_expert_per_token)
        probs = probs.softmax(dim=1, dtype=torch.float).to(dtype=x.dtype)
    else:
        probs, indices = self.gate(x)
    if self.config.routed_scaling_factor != 1.0:
        probs = probs * self.config.routed_scaling_factor
    return probs, indices


def _with_router(self, x: torch.Tensor, experts: Callable) -> torch.Tensor:
    """``LLaMAMoE.forward`` (litgpt 0.5.13) around ``experts(self, x, probs, indices)``, which adds up the routed
    experts' outputs: ``self`` is the ``LLaMAMoE``."""
    B, T, C = x.size()
    flat = x.view(-1, C)  # (B*T, C)
    probs, indices = _router(self, flat)
    y = experts(self, flat, probs, indices).view(B, T, C)
    if self.config.n_shared_expert:
        y = y + self.shared_experts(x)
    return y


def _dense_experts(self, x: torch.Tensor, probs: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    # each token's weight for each expert: its routing probability where routed, else zero (topk's indices differ)
    routed = indices.unsqueeze(-1) == torch.arange(self.config.n_expert, device=x.device)  # (B*T, k, n_expert)
    weights = (probs.unsqueeze(-1) * routed).sum(dim=1)  # (B*T, n_expert)
    y = torch.zeros_like(x)
    for e, expert in enumerate(self.experts):
        y = y + weights[:, e, None] * expert(x)
    return y


def _routed_experts(self, x: torch.Tensor, probs: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    weights = [[getattr(expert, name).weight for expert in self.experts] for name in ("fc_1", "fc_2", "proj")]
    return routed_experts_op(x, probs, indices, *weights)


def routed_densely(self, x: torch.Tensor) -> torch.Tensor:
    """``LLaMAMoE.forward`` with static shapes: every expert on every token."""
    return _with_router(self, x, _dense_experts)


def routed_experts(x: torch.Tensor, probs: torch.Tensor, indices: torch.Tensor, fc_1: list[torch.Tensor],
                   fc_2: list[torch.Tensor], proj: list[torch.Tensor]) -> torch.Tensor:  # fmt: skip
    """litgpt's loop over the experts (``LLaMAMoE.forward``), each a bias-free ``LLaMAMLP`` of weights ``fc_1[e]``,
    ``fc_2[e]``, ``proj[e]``, on the tokens routed to it: what ``routed_experts_op`` runs."""
    y = torch.zeros_like(x)
    masks = (indices.unsqueeze(-1) == torch.arange(len(fc_1), device=x.device)).permute(2, 0, 1)
    for mask, w1, w2, w3 in zip(masks, fc_1, fc_2, proj):
        token_idx, expert_idx = torch.where(mask)
        tokens = x[token_idx]
        out = F.linear(F.silu(F.linear(tokens, w1)) * F.linear(tokens, w2), w3)  # LLaMAMLP.forward
        y[token_idx] += probs[token_idx, expert_idx, None] * out
    return y


# An op of thunder's PyTorch executor: among the executors of every compilation, and of a later process's (the
# compile cache names it by executor and name).
routed_experts_op = torch_ex.register_operator(
    "litgpt_moe_routed_experts", meta=lambda x, *args: TensorProxy(like=x), fn=routed_experts
)


def routed(self, x: torch.Tensor) -> torch.Tensor:
    """``LLaMAMoE.forward`` where nothing is differentiated: the experts' loop as one operator."""
    return _with_router(self, x, _dense_experts if self.config.bias else _routed_experts)


def substitute_in(model: ModuleType) -> None:
    """Register ``routed`` and ``routed_densely`` for litgpt's ``LLaMAMoE.forward``, ``model`` being ``litgpt.model``."""
    from thunder_ext.thunder026.substitutes import interpret_instead

    interpret_instead(model.LLaMAMoE.forward, routed, differentiated=routed_densely)
