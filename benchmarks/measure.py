"""How the suite measures: runners built side by side, interleaved timing, and allocations per call."""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import thunder
import torch
from thunder.executors.torch_compile import torch_compile_ex

import thunder_ext
# the suite's timing, shared with the demo; the benchmarks import it from here
from thunder_ext.gc_pause import gc_paused  # noqa: F401
from thunder_ext.tools.timing import (  # noqa: F401
    interleaved_medians, interleaved_samples, report_status, seconds, status, synchronize,
)

# "after other shapes": one torch.compile per configuration, as a program that has run other shapes
# before, so that Dynamo's automatic dynamic shapes have made its graph shape-generic (litgpt's slice
# write of the KV cache then becomes a copy). "fresh": static shapes, as a fresh process compiles them.
TORCH_COMPILE, TORCH_COMPILE_FRESH = "torch.compile (after other shapes)", "torch.compile (fresh)"
THUNDER_TC, THUNDER_EXT_TC = "thunder.jit + torch.compile ex", "thunder_ext.jit + torch.compile ex"
RUNNERS = ("eager", "thunder.jit", "thunder_ext.jit", TORCH_COMPILE, TORCH_COMPILE_FRESH, THUNDER_TC, THUNDER_EXT_TC)


def compiled(runner: str, fn: Callable) -> Callable:
    """``fn`` as ``runner`` runs it (``fn`` is a function or a module; each runner needs its own module)."""
    if runner == "eager":
        return fn
    if runner in (TORCH_COMPILE, TORCH_COMPILE_FRESH, THUNDER_TC, THUNDER_EXT_TC):
        configure_inductor()
    if runner == "thunder.jit":
        return thunder.jit(fn)
    if runner == "thunder_ext.jit":
        return thunder_ext.jit(fn)
    if runner == THUNDER_TC:
        return thunder.jit(fn, executors=[torch_compile_ex, *thunder.get_default_executors()])
    if runner == THUNDER_EXT_TC:
        return thunder_ext.jit(fn, executors=[torch_compile_ex, *thunder.get_default_executors()])
    if runner == TORCH_COMPILE:
        return torch.compile(fn)
    if runner == TORCH_COMPILE_FRESH:
        return torch.compile(fn, dynamic=False)
    raise ValueError(f"unknown runner {runner!r}; expected one of {RUNNERS}")


def configure_inductor() -> None:
    # Inductor's background compile workers import modules while thunder's interpreter, tracing a
    # later jit in this process, iterates such dicts ("dictionary changed size during iteration").
    torch._inductor.config.compile_threads = 1
    # Inductor bakes a thread count of its own into the C++ kernels it writes ("#pragma omp parallel
    # num_threads(2)", whatever torch.set_num_threads says): give it the one every runner has, which
    # covers thunder's torch.compile executor too (it calls Inductor with the same config).
    torch._inductor.config.cpp.threads = torch.get_num_threads()
    # every configuration compiles the same code objects again: past Dynamo's default limit of 8
    # recompilations it would silently run them eagerly
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)


@dataclass(frozen=True)
class Allocations:
    """Tensor memory allocated by one call: in all, at most live at once, and the largest single block."""

    total: int
    peak: int
    largest: int


def allocations(fn: Callable[[], object], device: torch.device) -> Allocations:
    status("counting allocations")
    if device.type == "cuda":
        return _cuda_allocations(fn, device)
    return _cpu_allocations(fn)


def _cuda_allocations(fn: Callable[[], object], device: torch.device) -> Allocations:
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_stats(device)
    fn()
    synchronize(device)
    after = torch.cuda.memory_stats(device)
    total = after["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"]
    peak = after["allocated_bytes.all.peak"] - before["allocated_bytes.all.current"]
    # the CUDA allocator keeps no per-block history without recording it; the peak bounds the largest
    return Allocations(total=total, peak=peak, largest=peak)


def _cpu_allocations(fn: Callable[[], object]) -> Allocations:
    # PyTorch's CPU allocator keeps no statistics; the profiler records every allocation and free with
    # its size and the running total. Its event tree is a private API, read here and nowhere else.
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()

    def walk(events: Iterable) -> Iterable:
        for e in events:
            yield e
            yield from walk(e.children)

    events = [e for e in walk(prof.profiler.kineto_results.experimental_event_tree()) if e.tag == _EventType.Allocation]
    sizes = [e.extra_fields.alloc_size for e in events]
    running = [e.extra_fields.total_allocated for e in sorted(events, key=lambda e: e.start_time_ns)]
    return Allocations(
        total=sum(s for s in sizes if s > 0), peak=max(running, default=0), largest=max(sizes, default=0)
    )


def machine(device: torch.device) -> str:
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        where = f"{platform.machine()} CPU, {torch.get_num_threads()} threads"
    return (
        f"{where}; torch {torch.__version__}, lightning-thunder {thunder.__version__}, "
        f"Python {platform.python_version()}"
    )
