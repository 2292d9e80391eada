"""Compile time: the first call of ``thunder_ext.jit`` against stock ``thunder.jit`` on the decode case's model.

A fresh jit of a fresh model each round; its first call (a prefill of the prompt) traces, transforms and
compiles. The two jits alternate which goes first, after each has compiled a trivial function once, so
that neither pays for lazy imports.
"""

from __future__ import annotations

import copy
import statistics

import torch

from thunder_ext.benchmarks.decode import PROMPT, prompt
from thunder_ext.benchmarks.measure import compiled, seconds
from thunder_ext.benchmarks.report import Table, Target, ratio
from thunder_ext.demo import small_model

JITS = ("thunder.jit", "thunder_ext.jit")

Result = dict[str, float]  # jit -> median seconds of the first call


def configs(quick: bool) -> list[int]:
    return [512]


def first_call(runner: str, base: torch.nn.Module, device: torch.device) -> float:
    model = copy.deepcopy(base)
    model.set_kv_cache(batch_size=1, device=device)
    jitted = compiled(runner, model)
    x = prompt(1, device)
    return seconds(lambda: jitted(x, torch.arange(PROMPT, device=device)), device)


def measure(length: int, device: torch.device, quick: bool) -> Result:
    for runner in JITS:
        compiled(runner, torch.neg)(torch.ones(1, device=device))
    base = small_model(length).to(device)
    samples: dict[str, list[float]] = {runner: [] for runner in JITS}
    for round_ in range(1 if quick else 2):
        for runner in JITS if round_ % 2 == 0 else reversed(JITS):
            samples[runner].append(first_call(runner, base, device))
    return {runner: statistics.median(samples[runner]) for runner in JITS}


def report(results: dict[int, Result]) -> Table:
    table = Table(
        name="compile_time",
        title="Compile time: first calls of a fresh jit",
        setup=(
            f"The decode case's model, batch 1: seconds of the first call of a fresh jit (a prefill of {PROMPT} "
            "tokens), which traces, transforms and compiles. Median of rounds that alternate which jit goes first."
        ),
        columns=["max_seq_length", *(f"{r} s" for r in JITS), "thunder_ext / thunder.jit"],
    )
    for length, r in results.items():
        stock, ext = r["thunder.jit"], r["thunder_ext.jit"]
        table.rows.append([str(length), f"{stock:.2f}", f"{ext:.2f}", ratio(ext, stock)])
        table.targets.append(Target(f"max_seq_length {length}: the extension adds at most 10% to the first call",
                                    ratio(ext, stock), ext <= 1.10 * stock))  # fmt: skip
    return table
