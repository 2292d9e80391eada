"""litgpt decode step: one token per sequence through a small llama-style model with its KV cache.

The model is the demo's (``thunder_ext.demo.small_model``: 4 layers, n_embd 512, 8 heads), for batch 1
and 4 and several ``max_seq_length``. Without ``input_pos_maxp1`` litgpt attends over the whole cache
with a mask, so every runner's step grows with the cache length; what differs is how the write is done.
For the same reason a step costs the same at any position, so decoding starts at position 0, with no
prefill: thunder compiles one trace per config instead of two (about 20 s each on the CPU machine).
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
from thunder_ext.benchmarks.report import Table, Target, figure, mib, ms, ratio, save, torch_compile_executor_parity
from thunder_ext.demo import small_model

PROMPT = 8


@dataclass
class Result:
    seconds: dict[str, float]  # median per decode step
    allocations: dict[str, Allocations]  # of one decode step
    cache_bytes: int  # one K (or V) buffer of one layer
    in_place: tuple[int, int]  # thunder_ext's cache writes run in place, of all its writes
    max_error: dict[str, float]  # largest |logit - eager logit| on the last step


def models(max_seq_length: int, batch: int, device: torch.device) -> dict[str, torch.nn.Module]:
    """One model per runner (each has its own cache), the same weights, caches set for ``batch``."""
    base = small_model(max_seq_length).to(device)
    out = {}
    for runner in RUNNERS:
        model = copy.deepcopy(base)
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
    runners = models(length, batch, device)
    token = prompt(batch, device)[:, -1:]
    # every runner makes the same calls, so each decodes the same positions and its last logits compare
    positions = dict.fromkeys(RUNNERS, 0)
    last: dict[str, torch.Tensor] = {}

    def step(runner: str):
        def call() -> None:
            position = positions[runner]
            positions[runner] += 1
            with torch.inference_mode():  # as litgpt's generate: the model's parameters require grad
                last[runner] = runners[runner](token, torch.tensor([position], device=device))

        return call

    calls = {runner: step(runner) for runner in RUNNERS}
    seconds = interleaved_medians(calls, device, warmup=3, repeat=5 if quick else 15)
    allocs = {runner: allocations(calls[runner], device) for runner in RUNNERS}
    decisions = thunder_ext.inplace_decisions(runners["thunder_ext.jit"])
    kv = runners["eager"].transformer.h[0].attn.kv_cache.k
    return Result(
        seconds=seconds,
        allocations=allocs,
        cache_bytes=kv.numel() * kv.element_size(),
        in_place=(sum(d.how != "copy" for d in decisions), len(decisions)),
        max_error={r: (last[r] - last["eager"]).abs().max().item() for r in RUNNERS},
    )


def report(results: dict[tuple[int, int], Result]) -> Table:
    table = Table(
        name="decode",
        title="litgpt decode step: time per token and memory per step",
        setup=(
            "The demo's llama-style litgpt model (4 layers, n_embd 512, 8 heads, float32), one new token per "
            "sequence at a time (litgpt attends over the whole masked cache, so a step costs the same at any "
            "position). Median ms per decode step, runners interleaved in blocks of steps; memory: tensor "
            "bytes allocated by one step (largest single block and peak live), next to the size of one cache buffer."
        ),
        columns=["batch", "max_seq_length", *(f"{r} ms" for r in RUNNERS), "thunder_ext / eager",
                 "thunder.jit / thunder_ext", "cache buffer MiB", *(f"{r} largest / peak MiB" for r in RUNNERS),
                 "thunder_ext writes in place"],  # fmt: skip
    )
    for (batch, length), r in results.items():
        ext = r.seconds["thunder_ext.jit"]
        table.rows.append(
            [str(batch), str(length), *(ms(r.seconds[n]) for n in RUNNERS), ratio(ext, r.seconds["eager"]),
             ratio(r.seconds["thunder.jit"], ext), mib(r.cache_bytes),
             *(f"{mib(r.allocations[n].largest)} / {mib(r.allocations[n].peak)}" for n in RUNNERS),
             f"{r.in_place[0]} of {r.in_place[1]}"]  # fmt: skip
        )
    errors = ", ".join(f"{n} {max(r.max_error[n] for r in results.values()):.1e}" for n in RUNNERS[1:])
    table.notes.append(f"Largest difference from eager's logits on the last step, over all rows: {errors}.")
    table.targets = _targets(results)

    def plot(path: Path, machine: str) -> None:
        batches = sorted({b for b, _ in results})
        fig, axes = figure("litgpt decode step (4 layers, n_embd 512), ms per token", machine, ncols=len(batches))
        for ax, batch in zip(axes, batches):
            lengths = [L for b, L in results if b == batch]
            for n in RUNNERS:
                ax.plot(lengths, [results[batch, L].seconds[n] * 1e3 for L in lengths], marker="o", label=n)
            ax.set(xscale="log", xlabel="max_seq_length", ylabel="ms per decode step (median)", title=f"batch {batch}")
            ax.legend(fontsize=8)
        save(fig, path)

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
