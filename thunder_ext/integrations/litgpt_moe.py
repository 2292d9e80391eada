"""litgpt's mixture of experts (``LLaMAMoE``: Mixtral, Qwen3-MoE, DeepSeek's routed experts) under the extension.

litgpt routes each token with ``torch.where(mask)``, whose result's shape depends on the routing: thunder 0.2.6
cannot trace it ("torch.where() does not support only specifying a condition"), stock ``thunder.jit`` neither. In
the extension's compilations the interpreter traces ``routed_densely`` instead (``thunder026/substitutes.py``), the
same sum in shapes that do not depend on the values: every expert runs on every token, and a token's output adds
each expert's result times that token's routing weight for it, which is zero for the experts not routed to it.

The values are litgpt's: for each token, the experts routed to it are added in litgpt's order, with litgpt's
weights, and an expert not routed adds an exact zero (a finite result times 0.0). What it costs: every expert's MLP
on every token, ``n_expert / n_expert_per_token`` times the routed experts' work (4x for Mixtral), where litgpt
runs each expert on its tokens only; a gather of the routed experts' weights would not, and is not built.
"""

from __future__ import annotations

from types import ModuleType

import torch


def routed_densely(self, x: torch.Tensor) -> torch.Tensor:
    """``LLaMAMoE.forward`` (litgpt 0.5.13) with static shapes: ``self`` is the ``LLaMAMoE``."""
    B, T, C = x.size()
    residual_x = x
    x = x.view(-1, C)  # (B*T, C)
    if not self.config.n_expert_groups:
        router = self.gate(x)  # (B*T, n_expert)
        probs, indices = torch.topk(router, self.config.n_expert_per_token)  # (B*T, n_expert_per_token)
        probs = probs.softmax(dim=1, dtype=torch.float).to(dtype=x.dtype)
    else:
        probs, indices = self.gate(x)
    if self.config.routed_scaling_factor != 1.0:
        probs = probs * self.config.routed_scaling_factor
    # each token's weight for each expert: its routing probability where routed, else zero (topk's indices differ)
    routed = indices.unsqueeze(-1) == torch.arange(self.config.n_expert, device=x.device)  # (B*T, k, n_expert)
    weights = (probs.unsqueeze(-1) * routed).sum(dim=1)  # (B*T, n_expert)
    y = torch.zeros_like(x)
    for e, expert in enumerate(self.experts):
        y = y + weights[:, e, None] * expert(x)
    y = y.view(B, T, C)
    if self.config.n_shared_expert:
        y = y + self.shared_experts(residual_x)
    return y


def substitute_in(model: ModuleType) -> None:
    """Register ``routed_densely`` for litgpt's ``LLaMAMoE.forward``, ``model`` being ``litgpt.model``."""
    from thunder_ext.thunder026.substitutes import interpret_instead

    interpret_instead(model.LLaMAMoE.forward, routed_densely)
