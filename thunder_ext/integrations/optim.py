"""``thunder_ext.jit(optimizer.step)`` for ``torch.optim``'s SGD, Adam and AdamW.

Thunder 0.2.6 cannot trace ``Optimizer.step`` as written: the optimizer keeps its state in a dict keyed by
parameters, and thunder's proxies cannot be hashed (``TypeError: unhashable type: 'TensorProxy'``). So the
step is split where torch's own ``step`` splits it: the optimizer's ``_init_group`` gathers each group's
tensors in eager PyTorch (creating the state on the first step, as ``step`` does), and the functional
update that ``step`` then calls (``torch.optim.adam.adam``, ``torch.optim.sgd.sgd``, with ``foreach``
as the group says) runs under ``thunder_ext.jit``, so every parameter and state write runs in place.

- SGD with momentum creates its momentum buffers inside the update on the first step, as values of the
  step: that one step runs eagerly (``torch.optim.SGD.step``); every later step is jitted.
- The group's hyperparameters are passed as Python numbers, which thunder's cache takes as constants:
  a new ``lr`` (a scheduler) compiles the update again.
- Refused, with a ``TypeError`` that names the optimizer and the option, before anything is written:
  other optimizers, a ``closure``, and ``capturable``, ``differentiable``, ``fused`` or complex parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim.adam import adam
from torch.optim.sgd import sgd

from thunder_ext.thunder026.compiled import share_compile_data

Group = tuple[list, dict[str, Any]]  # the tensor lists of one parameter group, and its hyperparameters


def _adam_group(optimizer: torch.optim.Adam, group: dict) -> Group:
    tensors: list[list[torch.Tensor]] = [[], [], [], [], [], []]
    has_complex = optimizer._init_group(group, *tensors)
    beta1, beta2 = group["betas"]
    hyper = {name: group[name] for name in ("amsgrad", "lr", "weight_decay", "eps", "maximize", "foreach",
                                            "capturable", "differentiable", "fused", "decoupled_weight_decay")}  # fmt: skip
    return tensors, {**hyper, "has_complex": has_complex, "beta1": beta1, "beta2": beta2}


def _sgd_group(optimizer: torch.optim.SGD, group: dict) -> Group:
    tensors: list[list] = [[], [], []]
    has_sparse_grad = optimizer._init_group(group, *tensors)
    hyper = {name: group[name] for name in ("weight_decay", "momentum", "lr", "dampening", "nesterov",
                                            "maximize", "foreach", "fused")}  # fmt: skip
    return tensors, {**hyper, "has_sparse_grad": has_sparse_grad}


# optimizer class -> (what its step gathers per group, the functional update its step runs); AdamW is an Adam
_STEPS: dict[type, tuple[Callable[[Any, dict], Group], Callable]] = {
    torch.optim.Adam: (_adam_group, adam),
    torch.optim.SGD: (_sgd_group, sgd),
}
_REFUSED_OPTIONS = ("capturable", "differentiable", "fused")


def _steps_of(optimizer: torch.optim.Optimizer) -> tuple[Callable[[Any, dict], Group], Callable]:
    name = type(optimizer).__name__
    steps = next((s for cls, s in _STEPS.items() if isinstance(optimizer, cls)), None)
    if steps is None:
        raise TypeError(
            f"thunder_ext.jit: `{name}.step` is not supported: thunder 0.2.6 cannot trace an optimizer's step (its "
            "state is a dict keyed by parameters), and thunder_ext jits the functional update of SGD, Adam and AdamW only"
        )
    for group in optimizer.param_groups:
        if option := next((o for o in _REFUSED_OPTIONS if group.get(o)), None):
            raise TypeError(f"thunder_ext.jit: `{name}.step` with `{option}=True` is not supported")
    if any(p.is_complex() for group in optimizer.param_groups for p in group["params"]):
        raise TypeError(f"thunder_ext.jit: `{name}.step` over complex parameters is not supported")
    return steps


class JittedOptimizerStep:
    """``optimizer.step`` with its functional update under ``thunder_ext.jit``; see the module's docstring.

    ``thunder.last_traces`` and ``thunder_ext.inplace_decisions`` accept it (they describe the update).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, jit: Callable[..., Callable], **jit_kwargs: Any) -> None:
        self.optimizer = optimizer
        self.gather, functional = _steps_of(optimizer)

        def update(groups: list[Group]) -> None:
            for tensors, hyper in groups:
                functional(*tensors, **hyper)

        self.update = jit(update, **jit_kwargs)
        share_compile_data(self, self.update)  # thunder.compile_data and compile_stats describe the update

    @torch.no_grad()
    def __call__(self, closure: Callable | None = None) -> None:
        if closure is not None:
            raise TypeError(f"thunder_ext.jit: `{type(self.optimizer).__name__}.step` with a closure is not supported")
        _steps_of(self.optimizer)  # options may have changed since jit
        if isinstance(self.optimizer, torch.optim.SGD) and self._momentum_buffers_missing():
            self.optimizer.step()  # the momentum buffers are made by the first step itself
            return
        groups = [self.gather(self.optimizer, group) for group in self.optimizer.param_groups]
        self.update([g for g in groups if g[0][0]])  # groups without any gradient are left as they are

    def _momentum_buffers_missing(self) -> bool:
        return any(
            group["momentum"] != 0 and p.grad is not None and self.optimizer.state[p].get("momentum_buffer") is None
            for group in self.optimizer.param_groups
            for p in group["params"]
        )


def is_optimizer_step(fn: Any) -> bool:
    """Whether ``fn`` is the bound ``step`` of a ``torch.optim.Optimizer``."""
    return getattr(fn, "__name__", None) == "step" and isinstance(getattr(fn, "__self__", None), torch.optim.Optimizer)
