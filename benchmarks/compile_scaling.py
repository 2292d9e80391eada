"""Compile scaling: the extension's passes and the first call against the number of writes.

The program is an optimizer-like step over a list of ``n`` tensors, ``t.mul_(0.9).add_(1.0)`` for each: two
in-place ops per tensor, which the functionalization makes one ``copy_to_out_`` (one write per tensor), all
run in place. ``writes`` counts the program's in-place ops. Runners: ``thunder.jit`` and the extension
(``thunder.jit`` with ``thunder_ext.inplace_ex`` and the extension's transform, as ``thunder_ext.jit`` adds
them), both with thunder's default executors. Pass time: seconds spent in the extension's passes (its
transform's two hooks: functionalization and the guards before thunder's passes, the checker and buffer
reuse after; and ``inplace_ex``'s fusion pass, which pins what rematerialization must not recompute),
measured inside the same first call; and again in one more first call of the extension with Python's
automatic garbage collection paused, which tells the passes' own growth from that of the full collections
that fall inside them (each scans every object thunder holds, and so grows with the trace). Up to
``TORCH_COMPILE_UP_TO`` writes, the extension's passes again (collection paused) with thunder's torch.compile
executor, where the step is one region holding every write, so that the region rules are what grows.

Each configuration runs in a fresh process (``compile_time.in_fresh_process``): thunder's caches and the
memory of a larger trace do not carry over. Runners alternate which goes first from round to round.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import thunder
import torch
from thunder.executors.torch_compile import torch_compile_ex
from thunder.extend import Executor

from thunder_ext.benchmarks.compile_time import in_fresh_process
from thunder_ext.benchmarks.measure import status
from thunder_ext.benchmarks.report import Table, Target, figure, ratio, save
from thunder_ext.decisions import inplace_decisions
from thunder_ext.executors import inplace_ex
from thunder_ext.transforms import InplaceTransform

STOCK, EXT = "thunder.jit", "thunder_ext"
# Above this, Inductor compiling the step's one region takes many minutes on a 2-core CPU (1.8 at 1,000 writes).
TORCH_COMPILE_UP_TO = 1000


@dataclass(frozen=True)
class Result:
    first_call: dict[str, float]  # runner -> median seconds
    pass_seconds: float  # the extension's transform, median over rounds
    pass_seconds_uncollected: float  # the same, in one more first call with automatic collection paused
    pass_seconds_torch_compile: float | None  # the same with the torch.compile executor; None above TORCH_COMPILE_UP_TO
    in_place: int  # copy_to_out_ run in place
    decided: int  # copy_to_out_ decided


class TimedInplaceTransform(InplaceTransform):
    """The extension's transform, adding up the seconds its hooks and ``inplace_ex``'s fusion pass take
    (the latter while ``timing_the_executor`` is open)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0

    @contextmanager
    def _timed(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    def transform_traces_pre_prologue(self, *args, **kwargs):
        with self._timed():
            return super().transform_traces_pre_prologue(*args, **kwargs)

    def transform_trace_post_optimization(self, *args, **kwargs):
        with self._timed():
            return super().transform_trace_post_optimization(*args, **kwargs)

    @contextmanager
    def timing_the_executor(self) -> Iterator[None]:
        untimed = type(inplace_ex).fusion_pass

        def timed(trace):
            with self._timed():
                return untimed(inplace_ex, trace)

        inplace_ex.fusion_pass = timed  # this process only: each configuration runs in a fresh one
        try:
            yield
        finally:
            del inplace_ex.fusion_pass


def configs(quick: bool) -> list[int]:
    return [100, 300] if quick else [100, 300, 1000, 3000]


def step(tensors: list[torch.Tensor]) -> None:
    for t in tensors:
        t.mul_(0.9).add_(1.0)


def measure(writes: int, device: torch.device, quick: bool) -> Result:
    status(f"{writes} writes: compiling each runner in a fresh process")
    return in_fresh_process(_measure, writes, device, 1 if quick or writes >= 3000 else 2, torch.get_num_threads())


def _measure(writes: int, device: torch.device, rounds: int, threads: int) -> Result:
    torch.set_num_threads(threads)
    for warm in (thunder.jit(torch.neg), thunder.jit(torch.neg, executors=[inplace_ex, *thunder.get_default_executors()])):
        warm(torch.ones(1, device=device))  # lazy imports are no runner's cost
    first: dict[str, list[float]] = {STOCK: [], EXT: []}
    passes: list[float] = []
    for round_ in range(rounds):
        for runner in (STOCK, EXT) if round_ % 2 == 0 else (EXT, STOCK):
            tensors = [torch.randn(4, device=device) for _ in range(writes // 2)]
            transform = TimedInplaceTransform()
            jitted = (
                thunder.jit(step)
                if runner == STOCK
                else thunder.jit(step, executors=[inplace_ex, *thunder.get_default_executors()], transforms=[transform])
            )
            with transform.timing_the_executor():
                start = time.perf_counter()
                jitted(tensors)
                first[runner].append(time.perf_counter() - start)
            if runner == EXT:
                passes.append(transform.seconds)
                decisions = inplace_decisions(jitted)
    in_place = sum(d.how != "copy" for d in decisions)
    uncollected = _pass_seconds_uncollected(writes, device, [])
    in_regions = _pass_seconds_uncollected(writes, device, [torch_compile_ex]) if writes <= TORCH_COMPILE_UP_TO else None
    first_call = {r: statistics.median(s) for r, s in first.items()}
    return Result(first_call, statistics.median(passes), uncollected, in_regions, in_place, len(decisions))


def _pass_seconds_uncollected(writes: int, device: torch.device, fusion: list[Executor]) -> float:
    tensors = [torch.randn(4, device=device) for _ in range(writes // 2)]
    transform = TimedInplaceTransform()
    executors = [inplace_ex, *fusion, *thunder.get_default_executors()]
    jitted = thunder.jit(step, executors=executors, transforms=[transform])
    gc.collect()
    gc.disable()
    try:
        with transform.timing_the_executor():
            jitted(tensors)
    finally:
        gc.enable()
    return transform.seconds


def report(results: dict[int, Result]) -> Table:
    table = Table(
        name="compile_scaling",
        title="Compile scaling: the extension's passes against the number of writes",
        setup=(
            "An optimizer-like step over a list of tensors (`t.mul_(0.9).add_(1.0)` each; writes: the program's "
            "in-place ops), thunder's default executors: seconds of the first call of a fresh jit, and of the "
            "extension's passes within it. Median of rounds that alternate which runner goes first (one round at "
            "3,000 writes), each size in a fresh process. Last column: the passes in one more first call with "
            "Python's automatic garbage collection paused (a full collection inside a pass scans all of thunder's "
            "objects, which grow with the trace). Last but one: the same with thunder's torch.compile executor added, "
            f"where the step is one region that holds every write (up to {TORCH_COMPILE_UP_TO:,} writes: above, Inductor "
            "compiles that region for many minutes)."
        ),
        columns=["writes", "copy_to_out_ in place", f"{STOCK} first call s", f"{EXT} first call s",
                 f"{EXT} / {STOCK}", "pass s", "pass ms per write", "pass ms per write, collection paused",
                 "the same, torch.compile executor"],  # fmt: skip
    )
    for writes, r in results.items():
        stock, ext = r.first_call[STOCK], r.first_call[EXT]
        in_regions = "-" if r.pass_seconds_torch_compile is None else f"{r.pass_seconds_torch_compile / writes * 1e3:.3f}"
        table.rows.append([f"{writes:,}", f"{r.in_place} of {r.decided}", f"{stock:.2f}", f"{ext:.2f}", ratio(ext, stock),
                           f"{r.pass_seconds:.3f}", f"{r.pass_seconds / writes * 1e3:.3f}",
                           f"{r.pass_seconds_uncollected / writes * 1e3:.3f}", in_regions])  # fmt: skip
        table.targets.append(Target(f"{writes:,} writes: every write in place", f"{r.in_place} of {r.decided}",
                                    r.decided > 0 and r.in_place == r.decided))  # fmt: skip
    most, fewest = max(results), min(results)
    if most >= 3000:
        stock, ext = results[most].first_call[STOCK], results[most].first_call[EXT]
        table.targets.append(Target(f"{most:,} writes: the extension adds at most 5% to the first call",
                                    ratio(ext, stock), ext <= 1.05 * stock))  # fmt: skip
    if most > fewest:
        per_write = {w: results[w].pass_seconds / w for w in (fewest, most)}
        growth = per_write[most] / per_write[fewest]
        table.targets.append(Target(f"pass time per write within 1.5x from {fewest:,} to {most:,} writes",
                                    f"{growth:.2f}x", growth <= 1.5))  # fmt: skip
    in_regions = {w: r.pass_seconds_torch_compile / w for w, r in results.items() if r.pass_seconds_torch_compile is not None}
    if len(in_regions) > 1:
        low, high = min(in_regions), max(in_regions)
        growth = in_regions[high] / in_regions[low]
        table.targets.append(Target(f"torch.compile executor: pass time per write within 1.5x from {low:,} to {high:,} writes",
                                    f"{growth:.2f}x", growth <= 1.5))  # fmt: skip

    def plot(path: Path, machine: str) -> None:
        fig, (first_ax, pass_ax) = figure(table.title, machine, ncols=2)
        sizes = sorted(results)
        for runner in (STOCK, EXT):
            first_ax.plot(sizes, [results[w].first_call[runner] for w in sizes], marker="o", label=runner)
        first_ax.set(xscale="log", yscale="log", xlabel="writes", ylabel="first call, s")
        first_ax.legend()
        per_write = [results[w].pass_seconds / w * 1e3 for w in sizes]
        uncollected = [results[w].pass_seconds_uncollected / w * 1e3 for w in sizes]
        pass_ax.plot(sizes, per_write, marker="o", label="extension's passes")
        pass_ax.plot(sizes, uncollected, marker="o", label="the same, collection paused")
        with_regions = [w for w in sizes if results[w].pass_seconds_torch_compile is not None]
        pass_ax.plot(with_regions, [results[w].pass_seconds_torch_compile / w * 1e3 for w in with_regions], marker="o",
                     label="the same, torch.compile executor (one region)")  # fmt: skip
        highest = max(per_write + uncollected + [results[w].pass_seconds_torch_compile / w * 1e3 for w in with_regions])
        pass_ax.set(xscale="log", xlabel="writes", ylabel="ms per write", ylim=(0, 1.5 * highest))
        pass_ax.legend()
        save(fig, path)

    table.plot = plot
    return table
