"""Inputs that require grad, as users have them: a litgpt model as constructed decoding under
``inference_mode``, ``torch.optim.Adam`` stepping ``nn.Parameter``s, and a training step of a BatchNorm model.

- ``decode``: the demo model (``thunder_ext.tools.demo_model.small_model``), batch 1, one token per step, under
  ``torch.inference_mode()`` as litgpt's ``generate`` runs it: ``thunder_ext.jit`` of the model as
  constructed (parameters require grad) against ``thunder_ext.jit`` of the same model after
  ``requires_grad_(False)``, and stock ``thunder.jit`` of the model as constructed.
- ``adam``: ``torch.optim.Adam`` over 128 ``nn.Parameter``s of 16,384 floats, ``foreach`` False and True,
  one ``step()`` per call (gradients set once): eager ``opt.step``, ``thunder_ext.jit(opt.step)``, and stock
  ``thunder.jit`` of the same split step (``JittedOptimizerStep`` with ``thunder.jit``: stock thunder cannot
  trace ``opt.step`` itself).
- ``train``: forward and backward of Conv2d-BatchNorm2d-ReLU-Linear in train mode, batch 32: eager,
  ``thunder.jit``, ``thunder_ext.jit``.
- ``view``: forward and backward of a Linear whose output's first features are scaled in place by a parameter
  (``h[:, :k].mul_(scale)``, a differentiated write through a view of an intermediate): eager and
  ``thunder_ext.jit`` (stock ``thunder.jit``'s gradient of it is wrong, so its time is no comparison).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import thunder
import torch

import thunder_ext
from thunder_ext.benchmarks.measure import Allocations, allocations, interleaved_medians
from thunder_ext.benchmarks.report import Table, Target, mib, ms, ratio
from thunder_ext.tools.demo_model import small_model
from thunder_ext.integrations.optim import JittedOptimizerStep

Config = tuple[str, object]
# seconds, allocations, and thunder_ext's writes: (in place, all)
Result = tuple[dict[str, float], dict[str, Allocations], tuple[int, int]]

AS_CONSTRUCTED, FROZEN, STOCK, EAGER = "thunder_ext.jit", "thunder_ext.jit, requires_grad_(False)", "thunder.jit", "eager"
PARAMS, NUMEL = 128, 2**14
VIEW_BATCH, VIEW_WIDTH, VIEW_SCALED = 4096, 512, 64


def configs(quick: bool) -> list[Config]:
    return [("decode", 512 if quick else 2048), ("adam", False), ("adam", True), ("train", 32), ("view", VIEW_BATCH)]


def _in_place(jitted: Callable) -> tuple[int, int]:
    decisions = thunder_ext.inplace_decisions(jitted)
    return sum(d.how != "copy" for d in decisions), len(decisions)


def _decode(length: int, device: torch.device, repeat: int) -> Result:
    base = small_model(length).to(device)
    models = {AS_CONSTRUCTED: copy.deepcopy(base), FROZEN: copy.deepcopy(base).requires_grad_(False), STOCK: copy.deepcopy(base)}
    jitted = {name: (thunder.jit if name == STOCK else thunder_ext.jit)(m) for name, m in models.items()}
    for m in models.values():
        m.set_kv_cache(batch_size=1, device=device)
    token, positions = torch.tensor([[7]], device=device), dict.fromkeys(models, 0)

    def step(name: str) -> Callable[[], object]:
        def call() -> object:
            positions[name] = (positions[name] + 1) % length
            with torch.inference_mode():
                return jitted[name](token, torch.tensor([positions[name]], device=device))

        return call

    calls = {name: step(name) for name in models}
    seconds = interleaved_medians(calls, device, warmup=2, repeat=repeat)
    return seconds, {n: allocations(c, device) for n, c in calls.items()}, _in_place(jitted[AS_CONSTRUCTED])


def _adam(foreach: bool, device: torch.device, repeat: int) -> Result:
    torch.manual_seed(0)
    steps = {}
    for name in (EAGER, AS_CONSTRUCTED, STOCK):
        params = [torch.nn.Parameter(torch.randn(NUMEL, device=device)) for _ in range(PARAMS)]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.Adam(params, lr=1e-3, foreach=foreach)
        steps[name] = {EAGER: opt.step, AS_CONSTRUCTED: thunder_ext.jit(opt.step), STOCK: JittedOptimizerStep(opt, thunder.jit)}[name]
    seconds = interleaved_medians(steps, device, warmup=3, repeat=repeat)
    return seconds, {n: allocations(c, device) for n, c in steps.items()}, _in_place(steps[AS_CONSTRUCTED])


class _ConvBatchNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.ReLU())
        self.head = torch.nn.Linear(16 * 14 * 14, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def _train(batch: int, device: torch.device, repeat: int) -> Result:
    torch.manual_seed(0)
    base = _ConvBatchNorm().to(device).train()
    models = {EAGER: copy.deepcopy(base), STOCK: thunder.jit(copy.deepcopy(base)), AS_CONSTRUCTED: thunder_ext.jit(copy.deepcopy(base))}
    x = torch.randn(batch, 3, 16, 16, device=device)

    def step(model: Callable) -> Callable[[], None]:
        return lambda: model(x).square().mean().backward()

    calls = {name: step(m) for name, m in models.items()}
    seconds = interleaved_medians(calls, device, warmup=2, repeat=repeat)
    return seconds, {n: allocations(c, device) for n, c in calls.items()}, _in_place(models[AS_CONSTRUCTED])


class _ScaledFeatures(torch.nn.Module):
    """A Linear whose first ``scaled`` output features a parameter scales in place."""

    def __init__(self, width: int, scaled: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(width, width)
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, scaled))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        h[:, : self.scale.numel()].mul_(self.scale)
        return h.relu()


def _view(batch: int, device: torch.device, repeat: int) -> Result:
    torch.manual_seed(0)
    base = _ScaledFeatures(VIEW_WIDTH, VIEW_SCALED).to(device)
    models = {EAGER: copy.deepcopy(base), AS_CONSTRUCTED: thunder_ext.jit(copy.deepcopy(base))}
    x = torch.randn(batch, VIEW_WIDTH, device=device)

    def step(model: Callable) -> Callable[[], None]:
        return lambda: model(x).square().mean().backward()

    calls = {name: step(m) for name, m in models.items()}
    seconds = interleaved_medians(calls, device, warmup=2, repeat=repeat)
    return seconds, {n: allocations(c, device) for n, c in calls.items()}, _in_place(models[AS_CONSTRUCTED])


def measure(config: Config, device: torch.device, quick: bool) -> Result:
    kind, value = config
    repeat = 5 if quick else 20
    return {"decode": _decode, "adam": _adam, "train": _train, "view": _view}[kind](value, device, repeat)


def _label(config: Config) -> str:
    kind, value = config
    labels = {"decode": f"decode, {value} tokens", "adam": f"Adam, foreach={value}", "train": f"train step, batch {value}",
              "view": f"train step writing through a view, batch {value}"}  # fmt: skip
    return labels[kind]


def report(results: dict[Config, Result]) -> Table:
    table = Table(
        name="requires_grad",
        title="Inputs that require grad: decode, optimizer step, training step",
        setup=(
            "Median ms per call, runners interleaved in one run; MiB: all tensor memory one call allocates, "
            f"and the largest single block. Adam: {PARAMS} × {NUMEL:,} float32 `nn.Parameter`s (one is "
            f"{NUMEL * 4 // 1024} KiB). Runners: the docstring of `benchmarks/requires_grad.py`."
        ),
        columns=["case", "runner", "ms", "MiB allocated", "largest block KiB", "thunder_ext writes in place"],
    )
    for config, (seconds, allocs, in_place) in results.items():
        for runner in seconds:
            table.rows.append([_label(config), runner, ms(seconds[runner]), mib(allocs[runner].total),
                               f"{allocs[runner].largest / 1024:.0f}", "{} of {}".format(*in_place) if runner == AS_CONSTRUCTED else ""])  # fmt: skip
    for config, (seconds, allocs, (in_place, writes)) in results.items():
        kind, label = config[0], _label(config)
        ext = seconds[AS_CONSTRUCTED]
        table.targets.append(Target(f"{label}: every write of thunder_ext in place", f"{in_place} of {writes}",
                                    writes > 0 and in_place == writes))  # fmt: skip
        if kind == "decode":
            table.targets.append(Target(f"{label}: as constructed within 1.05x of requires_grad_(False)",
                                        ratio(ext, seconds[FROZEN]), ext <= 1.05 * seconds[FROZEN]))  # fmt: skip
        elif kind != "view":  # stock thunder's gradient of `view` is wrong: its time is no comparison
            table.targets.append(Target(f"{label}: thunder_ext no slower than stock thunder",
                                        ratio(ext, seconds[STOCK]), ext <= seconds[STOCK]))  # fmt: skip
        if kind == "adam":
            largest = allocs[AS_CONSTRUCTED].largest
            table.targets.append(Target(f"{label}: no parameter-sized allocation per step",
                                        f"largest block {largest / 1024:.0f} KiB", largest < NUMEL * 4))  # fmt: skip
    return table
