"""Optimizer step: the functional single-tensor Adam update of ``torch.optim.adam`` over many parameters.

The body is ``torch.optim.adam._single_tensor_adam``'s for the defaults (no weight decay, no amsgrad,
not maximize), written out so that every runner compiles the same code: per parameter,
``exp_avg.lerp_``, ``exp_avg_sq.mul_().addcmul_()``, then ``param.addcdiv_``. The step count is a
constant, as it is within one step.
"""

from __future__ import annotations

import math

import torch

from thunder_ext.benchmarks.measure import (
    RUNNERS,
    THUNDER_EXT_TC,
    TORCH_COMPILE_FRESH,
    Allocations,
    allocations,
    compiled,
    interleaved_medians,
)
from thunder_ext.benchmarks.report import Table, Target, mib, ms, ratio, torch_compile_executor_parity

LR, BETA1, BETA2, EPS, STEP = 1e-3, 0.9, 0.999, 1e-8, 10

Result = tuple[dict[str, float], dict[str, Allocations]]


def adam_step(params: list, grads: list, exp_avgs: list, exp_avg_sqs: list) -> None:
    bias_correction1 = 1 - BETA1**STEP
    bias_correction2_sqrt = math.sqrt(1 - BETA2**STEP)
    step_size = LR / bias_correction1
    for param, grad, exp_avg, exp_avg_sq in zip(params, grads, exp_avgs, exp_avg_sqs):
        exp_avg.lerp_(grad, 1 - BETA1)
        exp_avg_sq.mul_(BETA2).addcmul_(grad, grad, value=1 - BETA2)
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(EPS)
        param.addcdiv_(exp_avg, denom, value=-step_size)


def configs(quick: bool) -> list[tuple[int, int]]:
    """(number of parameters, elements in each)."""
    return [(32, 2**16)] if quick else [(128, 2**14), (32, 2**18)]


def measure(config: tuple[int, int], device: torch.device, quick: bool) -> Result:
    count, numel = config
    state = [[torch.randn(numel, device=device) for _ in range(count)] for _ in range(4)]
    state[3] = [t.abs() for t in state[3]]  # exp_avg_sq is non-negative
    params, grads, exp_avgs, exp_avg_sqs = state
    # each runner updates its own state (its steps must not feed the others' inputs); grads are read only
    calls = {}
    for runner in RUNNERS:
        mine = [[t.clone() for t in ts] for ts in (params, exp_avgs, exp_avg_sqs)]
        fn = compiled(runner, adam_step)
        calls[runner] = lambda fn=fn, p=mine[0], m=mine[1], v=mine[2]: fn(p, grads, m, v)
    seconds = interleaved_medians(calls, device, warmup=3, repeat=5 if quick else 20)
    return seconds, {runner: allocations(call, device) for runner, call in calls.items()}


def report(results: dict[tuple[int, int], Result]) -> Table:
    table = Table(
        name="adam",
        title="Optimizer step: single-tensor Adam over many parameters",
        setup=(
            "`torch.optim.adam`'s single-tensor update written out (lerp_, mul_, addcmul_, sqrt, div, add_, "
            "addcdiv_ per parameter), float32. Median ms per step, runners interleaved; bytes: all tensor "
            "memory one step allocates."
        ),
        columns=["parameters × elements", *(f"{r} ms" for r in RUNNERS), "thunder_ext / eager",
                 "thunder.jit / thunder_ext", *(f"{r} MiB allocated" for r in RUNNERS)],  # fmt: skip
    )
    for (count, numel), (seconds, allocs) in results.items():
        table.rows.append(
            [f"{count} × {numel:,}", *(ms(seconds[r]) for r in RUNNERS),
             ratio(seconds["thunder_ext.jit"], seconds["eager"]), ratio(seconds["thunder.jit"], seconds["thunder_ext.jit"]),
             *(mib(allocs[r].total) for r in RUNNERS)]  # fmt: skip
        )
    for (count, numel), (seconds, _) in results.items():
        ext, eager, stock = (seconds[r] for r in ("thunder_ext.jit", "eager", "thunder.jit"))
        table.targets += [
            Target(f"{count} × {numel:,}: thunder_ext no slower than eager", ratio(ext, eager), ext <= eager),
            Target(f"{count} × {numel:,}: thunder_ext faster than stock thunder", ratio(stock, ext), ext < stock),
            torch_compile_executor_parity(f"{count} × {numel:,}", seconds),
            Target(f"{count} × {numel:,}: {THUNDER_EXT_TC} at most 1.2x {TORCH_COMPILE_FRESH}",
                   ratio(seconds[THUNDER_EXT_TC], seconds[TORCH_COMPILE_FRESH]),
                   seconds[THUNDER_EXT_TC] <= 1.2 * seconds[TORCH_COMPILE_FRESH]),  # fmt: skip
        ]
    return table
