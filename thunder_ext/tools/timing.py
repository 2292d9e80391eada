"""How the demo and the benchmarks time calls: one call's seconds, and calls of several runners taken in turns,
so that noise on a shared machine falls on all of them alike; what is being timed, for a progress line; and
first calls, which compile, with the garbage collector paused; and, where several benchmark processes share a
machine (scripts/gpu_check.sh), one process timing at a time."""

from __future__ import annotations

import contextlib
import fcntl
import os
import statistics
import time
from collections.abc import Callable, Iterator

import torch

from thunder_ext.gc_pause import gc_paused

_status: Callable[[str], None] = lambda text: None


@contextlib.contextmanager
def report_status(show: Callable[[str], None]) -> Iterator[None]:
    """Within the block, what the suite is doing (which runner compiles or is timed) goes to ``show``."""
    global _status
    previous, _status = _status, show
    try:
        yield
    finally:
        _status = previous


def status(text: str) -> None:
    _status(text)


TIMING_LOCK = "THUNDER_EXT_TIMING_LOCK"


@contextlib.contextmanager
def timing_turn() -> Iterator[None]:
    """Where the environment variable ``THUNDER_EXT_TIMING_LOCK`` names a file, hold an exclusive lock on it
    within the block: processes that compile side by side then time one at a time (the others may still
    compile on other cores). Without it, nothing is held."""
    path = os.environ.get(TIMING_LOCK)
    if not path:
        yield
        return
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(fn: Callable[[], object], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def interleaved_medians(
    calls: dict[str, Callable[[], object]], device: torch.device, *, warmup: int, repeat: int, rounds: int = 5
) -> dict[str, float]:
    """Median seconds per call of each entry over ``repeat`` timed calls (``interleaved_samples``)."""
    samples = interleaved_samples(calls, device, warmup=warmup, repeat=repeat, rounds=rounds)
    return {name: statistics.median(s) for name, s in samples.items()}


def interleaved_samples(
    calls: dict[str, Callable[[], object]], device: torch.device, *, warmup: int, repeat: int, rounds: int = 5
) -> dict[str, list[float]]:
    """Seconds of each of ``repeat`` timed calls of each entry, after ``warmup`` calls (the first
    compiles). The entries take turns in
    ``rounds`` blocks of consecutive calls, so that noise on a shared machine falls on all of them
    alike (ratios are then taken within one run); blocks, not single calls, because alternating call
    by call between code paths this different evicts each one's caches and slows microsecond calls
    (eager's 7.7 µs KV write took 19 µs that way). Each block starts with an untimed call, so that no
    entry pays for what the one before it evicted (stock thunder streams the whole cache)."""
    for i in range(warmup):
        for name, call in calls.items():
            status(f"compiling {name}" if i == 0 else f"warming up {name}")
            with gc_paused() if i == 0 else contextlib.nullcontext():
                call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    with timing_turn():
        for block in timed_blocks(repeat, rounds):
            for name, call in calls.items():
                status(f"timing {name}, {len(samples[name])} of {repeat} calls")
                call()
                samples[name] += [seconds(call, device) for _ in range(block)]
    return samples


def timed_blocks(repeat: int, rounds: int) -> list[int]:
    """The timed calls of each block of ``interleaved_samples``, in order: each block also makes one untimed call
    first, so an entry is called ``warmup + len(blocks) + repeat`` times (what the demo's KV cache must hold)."""
    block = max(1, repeat // rounds)
    return [min(block, repeat - start) for start in range(0, repeat, block)]
