"""litgpt decode step: one token per sequence through a small llama-style model with its KV cache.

The model is the demo's (``thunder_ext.tools.demo_model.small_model``: 4 layers, n_embd 512, 8 heads), for batch 1
and 4 and several ``max_seq_length``. Eager runs as litgpt's ``generate`` runs it, told the positions
written (``input_pos_maxp1``), so it attends to those; litgpt tells a thunder module nothing, so the
thunder runners with litgpt's cache attend over all ``max_seq_length`` positions with a mask, and their step
grows with it whatever the write costs; ``thunder_ext.jit`` with ``thunder_ext.set_kv_cache``'s cache attends
over its bucket. The torch.compile runners are called as the thunder ones: told nothing, so that their
shapes stay static (litgpt's ``generate`` would pass them a new ``input_pos_maxp1`` each step, a
recompilation each for ``dynamic=False``; the ``generate`` case has ``torch.compile(dynamic=True)`` with it).
Decoding starts at position 0, with no prefill: thunder compiles one trace per config instead of two (about
15 s each on the CPU machine).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch

import thunder_ext
from thunder_ext.benchmarks.measure import (
    RUNNERS,
    THUNDER_EXT_TC,
    THUNDER_TC,
    TORCH_COMPILE,
    TORCH_COMPILE_FRESH,
    Allocations,
    allocations,
    compiled,
    interleaved_medians,
)
from thunder_ext.benchmarks.generate import GROWING
from thunder_ext.benchmarks.report import Table, Target, mib, ms, plot_per_length, ratio, torch_compile_executor_parity
from thunder_ext.tools.demo_model import small_model

PROMPT = 8
DECODE_RUNNERS = (*RUNNERS, GROWING)


@dataclass
class Result:
    seconds: dict[str, float]  # median per decode step
    allocations: dict[str, Allocations]  # of one decode step
    cache_bytes: int  # one K (or V) buffer of one layer
    in_place: tuple[int, int]  # thunder_ext's cache writes run in place, of all its writes
    max_error: dict[str, float]  # largest |logit - eager logit| on the last step


def models(max_seq_length: int, batch: int, device: torch.device, runners=RUNNERS) -> dict[str, torch.nn.Module]:
    """One model per runner (each has its own cache), the same weights, caches set for ``batch``: litgpt's, or
    ``thunder_ext.set_kv_cache``'s for the growing-cache runner."""
    base = small_model(max_seq_length).to(device)
    out = {}
    for runner in runners:
        model = copy.deepcopy(base)
        if runner == GROWING:
            out[runner] = thunder_ext.jit(model)
            thunder_ext.set_kv_cache(out[runner], batch_size=batch, device=device)
        else:
            model.set_kv_cache(batch_size=batch, device=device)
            out[runner] = compiled(runner, model)
    return out


def prompt(batch: int, device: torch.device) -> torch.Tensor:
    return torch.randint(0, 1024, (batch, PROMPT), generator=torch.Generator().manual_seed(0)).to(device)


def configs(quick: bool) -> list[tuple[int, int]]:
    if quick:
        return [(1, 512), (1, 2048)]
    return [(batch, length) for batch in (1, 4) for length in (512, 2048, 8192)]


def measure(config: tuple[int, int], device: torch.device, quick: bool) -> Result:
    batch, length = config
    runners = models(length, batch, device, DECODE_RUNNERS)
    token = prompt(batch, device)[:, -1:]
    # every runner makes the same calls, so each decodes the same positions and its last logits compare
    positions = dict.fromkeys(DECODE_RUNNERS, 0)
    last: dict[str, torch.Tensor] = {}

    def step(runner: str):
        def call() -> None:
            position = positions[runner]
            positions[runner] += 1
            maxp1 = position + 1 if runner == "eager" else None  # as litgpt's generate calls each
            with torch.inference_mode():  # as litgpt's generate: the model's parameters require grad
                last[runner] = runners[runner](token, torch.tensor([position], device=device), maxp1)

        return call

    calls = {runner: step(runner) for runner in DECODE_RUNNERS}
    seconds = interleaved_medians(calls, device, warmup=3, repeat=5 if quick else 15)
    allocs = {runner: allocations(calls[runner], device) for runner in DECODE_RUNNERS}
    decisions = thunder_ext.inplace_decisions(runners["thunder_ext.jit"])
    kv = runners["eager"].transformer.h[0].attn.kv_cache.k
    return Result(
        seconds=seconds,
        allocations=allocs,
        cache_bytes=kv.numel() * kv.element_size(),
        in_place=(sum(d.how != "copy" for d in decisions), len(decisions)),
        max_error={r: (last[r] - last["eager"]).abs().max().item() for r in DECODE_RUNNERS},
    )


def report(results: dict[tuple[int, int], Result]) -> Table:
    table = Table(
        name="decode",
        title="litgpt decode step: time per token and memory per step",
        setup=(
            "The demo's llama-style litgpt model (4 layers, n_embd 512, 8 heads, float32), one new token per "
            "sequence at a time from position 0. Eager is told the positions written (`input_pos_maxp1`), as "
            "litgpt's generate tells it; the other runners are told nothing, as litgpt tells a thunder module, "
            "and attend over their whole cache: litgpt's (max_seq_length) or, for the growing cache, its bucket. "
            "Median ms per decode step, runners interleaved in blocks of steps; memory: tensor bytes allocated by "
            "one step (largest single block and peak live), next to the size of one cache buffer of litgpt's."
        ),
        columns=["batch", "max_seq_length", *(f"{r} ms" for r in DECODE_RUNNERS), "thunder_ext / eager",
                 "growing / eager", "thunder.jit / thunder_ext", "cache buffer MiB",
                 *(f"{r} largest / peak MiB" for r in DECODE_RUNNERS), "thunder_ext writes in place"],  # fmt: skip
    )
    for (batch, length), r in results.items():
        ext = r.seconds["thunder_ext.jit"]
        table.rows.append(
            [str(batch), str(length), *(ms(r.seconds[n]) for n in DECODE_RUNNERS), ratio(ext, r.seconds["eager"]),
             ratio(r.seconds[GROWING], r.seconds["eager"]), ratio(r.seconds["thunder.jit"], ext), mib(r.cache_bytes),
             *(f"{mib(r.allocations[n].largest)} / {mib(r.allocations[n].peak)}" for n in DECODE_RUNNERS),
             f"{r.in_place[0]} of {r.in_place[1]}"]  # fmt: skip
        )
    errors = ", ".join(f"{n} {max(r.max_error[n] for r in results.values()):.1e}" for n in DECODE_RUNNERS[1:])
    table.notes.append(f"Largest difference from eager's logits on the last step, over all rows: {errors}.")
    table.targets = _targets(results)

    def plot(path: Path, machine: str) -> None:
        panels = {f"batch {b}": {L: r.seconds for (bb, L), r in results.items() if bb == b} for b in sorted({b for b, _ in results})}
        plot_per_length(path, machine, "litgpt decode step (4 layers, n_embd 512), ms per token", panels, DECODE_RUNNERS,
                        "ms per decode step (median)")  # fmt: skip

    table.plot = plot
    return table


def _targets(results: dict[tuple[int, int], Result]) -> list[Target]:
    targets = []
    longest, shortest = (1, max(L for _, L in results)), (1, min(L for _, L in results))
    r = results[longest]
    ext, eager, stock = (r.seconds[n] for n in ("thunder_ext.jit", "eager", "thunder.jit"))
    targets.append(Target(f"decode at {longest[1]}, batch 1: thunder_ext within 1.10x of eager", ratio(ext, eager), ext <= 1.10 * eager))
    targets.append(Target(f"decode at {longest[1]}, batch 1: at least 2.5x faster than stock thunder", ratio(stock, ext), stock >= 2.5 * ext))
    r = results[shortest]
    ext, eager = r.seconds["thunder_ext.jit"], r.seconds["eager"]
    targets.append(Target(f"decode at {shortest[1]}, batch 1: thunder_ext within 1.15x of eager", ratio(ext, eager), ext <= 1.15 * eager))
    for length in sorted({L for b, L in results if b == 1}):  # issue 30: the step costs what the cache holds
        growing, eager = results[1, length].seconds[GROWING], results[1, length].seconds["eager"]
        targets.append(Target(f"decode at {length}, batch 1: {GROWING} at most 1.0x eager", ratio(growing, eager),
                              growing <= eager))  # fmt: skip
    for runner in ("thunder_ext.jit", THUNDER_EXT_TC):
        worst = max(results.values(), key=lambda r: r.allocations[runner].largest / r.cache_bytes)
        largest = worst.allocations[runner].largest
        targets.append(Target(
            f"no cache-sized allocation per decode step ({runner})",
            f"largest block {mib(largest)} MiB against a {mib(worst.cache_bytes)} MiB cache buffer",
            largest < worst.cache_bytes,
        ))  # fmt: skip
    targets += [torch_compile_executor_parity(f"decode batch {b} at {L}", r.seconds) for (b, L), r in results.items()]
    for (batch, length), r in results.items():  # issue 22: the step in one region, no slower than stock's
        ext, stock = r.seconds[THUNDER_EXT_TC], r.seconds[THUNDER_TC]
        targets.append(Target(f"decode batch {batch} at {length}: {THUNDER_EXT_TC} at most 1.00x {THUNDER_TC}",
                              ratio(ext, stock), ext <= stock))  # fmt: skip
    longest = max(L for _, L in results)
    for (batch, length), r in results.items():
        if length == longest:
            ext = r.seconds[THUNDER_EXT_TC]
            targets += [
                Target(f"decode at {length}, batch {batch}: {THUNDER_EXT_TC} faster than {tc}",
                       ratio(r.seconds[tc], ext), ext < r.seconds[tc])
                for tc in (TORCH_COMPILE_FRESH, TORCH_COMPILE)
            ]  # fmt: skip
    return targets
