"""Prefill: 128 prompt tokens into the KV cache of the decode case's model, batch 1.

Each timed call writes positions 0..127 again; what it overwrites does not change the cost, so every
call costs what the prefill into an empty cache costs.
"""

from __future__ import annotations

import torch

from thunder_ext.benchmarks.decode import models
from thunder_ext.benchmarks.measure import RUNNERS, Allocations, allocations, interleaved_medians
from thunder_ext.benchmarks.report import Table, mib, ms, ratio, torch_compile_executor_parity

TOKENS = 128

Result = tuple[dict[str, float], dict[str, Allocations]]


def configs(quick: bool) -> list[int]:
    return [2048]


def measure(length: int, device: torch.device, quick: bool) -> Result:
    runners = models(length, 1, device)
    x = torch.randint(0, 1024, (1, TOKENS), generator=torch.Generator().manual_seed(0)).to(device)
    positions = torch.arange(TOKENS, device=device)
    calls = {runner: torch.inference_mode()(lambda m=model: m(x, positions)) for runner, model in runners.items()}
    seconds = interleaved_medians(calls, device, warmup=2, repeat=3 if quick else 10)
    return seconds, {runner: allocations(call, device) for runner, call in calls.items()}


def report(results: dict[int, Result]) -> Table:
    table = Table(
        name="prefill",
        title=f"Prefill of {TOKENS} tokens into an empty KV cache",
        setup=(
            f"The decode case's model, batch 1, {TOKENS} prompt tokens in one call. Median ms per call, runners "
            "interleaved; memory: the largest single block and the peak of tensor bytes live during the call."
        ),
        columns=["max_seq_length", *(f"{r} ms" for r in RUNNERS), "thunder_ext / eager",
                 *(f"{r} largest / peak MiB" for r in RUNNERS)],  # fmt: skip
    )
    for length, (seconds, allocs) in results.items():
        table.rows.append(
            [str(length), *(ms(seconds[r]) for r in RUNNERS), ratio(seconds["thunder_ext.jit"], seconds["eager"]),
             *(f"{mib(allocs[r].largest)} / {mib(allocs[r].peak)}" for r in RUNNERS)]  # fmt: skip
        )
        table.targets.append(torch_compile_executor_parity(f"max_seq_length {length}", seconds))
    return table
