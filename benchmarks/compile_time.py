"""Compile time: the first call of ``thunder_ext.jit`` against stock ``thunder.jit`` on the decode case's model,
each with thunder's default executors and with the torch.compile executor first.

A fresh jit of a fresh model each round; its first call traces, transforms and compiles. Two first calls:
a prefill of the prompt (the cache written at several positions), and a decode step (one position, which
the torch.compile executor's region keeps after a check of it: ``executors/torch_compile_inplace.py``). The jits alternate which goes first, after each has compiled a trivial function once, so
that none pays for lazy imports.

The case runs in a fresh process of its own, as a user's first compile does: none of the modules and
compiled code of the cases before it, nor Dynamo's patched ``nn.Module.__init__``, which made one
quick run crash here ("dictionary changed size during iteration"; ``measure.gc_paused`` says why).
"""

from __future__ import annotations

import copy
import multiprocessing
import statistics
from collections.abc import Callable
from typing import Any

import torch

from thunder_ext.benchmarks.decode import PROMPT, prompt
from thunder_ext.benchmarks.measure import THUNDER_EXT_TC, THUNDER_TC, compiled, gc_paused, seconds, status
from thunder_ext.benchmarks.report import Table, Target, ratio, torch_compile_executor_parity
from thunder_ext.tools.demo_model import small_model

JITS = ("thunder.jit", "thunder_ext.jit", THUNDER_TC, THUNDER_EXT_TC)

STEPS = ("prefill", "decode")
Result = dict[str, dict[str, float]]  # step -> jit -> median seconds of the first call


def configs(quick: bool) -> list[int]:
    return [512]


def first_call(runner: str, base: torch.nn.Module, device: torch.device, step: str) -> float:
    model = copy.deepcopy(base)
    model.set_kv_cache(batch_size=1, device=device)
    jitted = compiled(runner, model)
    x = prompt(1, device)
    tokens, positions = (x, torch.arange(PROMPT)) if step == "prefill" else (x[:, -1:], torch.tensor([PROMPT]))
    with gc_paused():  # the torch.compile executor's jits patch nn.Module.__init__ in this process too
        return seconds(lambda: jitted(tokens, positions.to(device)), device)


def in_fresh_process(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a new Python process (spawned: it inherits no thread and no state of this one)."""
    pool = multiprocessing.get_context("spawn").Pool(1)
    try:
        return pool.apply(fn, args)
    finally:  # let the process exit by itself (a terminated one leaves its semaphores to be warned about)
        pool.close()
        pool.join()


def measure(length: int, device: torch.device, quick: bool) -> Result:
    status("compiling each jit in a fresh process (about a minute each)")
    return in_fresh_process(_measure, length, device, quick, torch.get_num_threads())


def _measure(length: int, device: torch.device, quick: bool, threads: int) -> Result:
    torch.set_num_threads(threads)
    for runner in JITS:
        compiled(runner, torch.neg)(torch.ones(1, device=device))
    base = small_model(length).to(device)
    samples: dict[str, dict[str, list[float]]] = {step: {runner: [] for runner in JITS} for step in STEPS}
    for round_ in range(1 if quick else 2):
        for step in STEPS:
            for runner in JITS if round_ % 2 == 0 else reversed(JITS):
                samples[step][runner].append(first_call(runner, base, device, step))
    return {step: {runner: statistics.median(s) for runner, s in by_runner.items()} for step, by_runner in samples.items()}


def report(results: dict[int, Result]) -> Table:
    table = Table(
        name="compile_time",
        title="Compile time: first calls of a fresh jit",
        setup=(
            f"The decode case's model, batch 1: seconds of the first call of a fresh jit, a prefill of {PROMPT} "
            "tokens or a decode step of one, which traces, transforms and compiles. Median of rounds that "
            "alternate which jit goes first."
        ),
        columns=["max_seq_length", "first call", *(f"{r} s" for r in JITS), "thunder_ext / thunder.jit",
                 f"{THUNDER_EXT_TC} / {THUNDER_TC}"],  # fmt: skip
    )
    for length, by_step in results.items():
        for step, r in by_step.items():
            stock, ext = r["thunder.jit"], r["thunder_ext.jit"]
            stock_tc, ext_tc = r[THUNDER_TC], r[THUNDER_EXT_TC]
            row = [str(length), step, *(f"{r[j]:.2f}" for j in JITS), ratio(ext, stock), ratio(ext_tc, stock_tc)]
            table.rows.append(row)
            table.targets.append(Target(f"max_seq_length {length}, {step}: the extension adds at most 10% to the first call",
                                        ratio(ext, stock), ext <= 1.10 * stock))  # fmt: skip
            table.targets.append(torch_compile_executor_parity(f"max_seq_length {length}, first {step} call", r))
    return table
