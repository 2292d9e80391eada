"""What the Python guards cost per call (``thunder026/python_guards.py``): litgpt's ``generate`` of the demo model
and of SmolLM2-135M's litgpt config (30 layers, random weights), under ``thunder_ext.jit`` with the growing cache,
the guard's check on and off by turns, ``generate`` call by call, on the same compiled programs.

Off: the check reads nothing and passes (``executors.checks._guard`` answers "nothing differs"); the prologue's call
of it stays, a function call, so off is the extension before the guards to within that call. A run: a 16-token
prompt and 128 new tokens at ``max_seq_length`` 2048 (a growth included). Per token: a ``generate`` call's wall
time over its new tokens; decode step: the median time of one new token (a one-token call). The guard alone: one
check of every value read by the compiled program that checks the most, timed by itself.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

import thunder
import torch
from thunder.core.compile_data import compile_data_and_stats

from thunder_ext.benchmarks.compile_time import EXT, build, timed_tokens, vocabulary
from thunder_ext.benchmarks.measure import gc_paused, status
from thunder_ext.benchmarks.report import Table, Target, ratio
from thunder_ext.executors import checks

PROMPT, NEW, ROUNDS = 16, 128, 5
MODES = ("guards on", "guards off")
LIMIT = 1.02  # the target: the guards cost at most 2% per call

Config = tuple[str, int]


def configs(quick: bool) -> list[Config]:
    return [("demo", 4)] if quick else [("demo", 4), ("SmolLM2-135M", 30)]


@contextlib.contextmanager
def _guards(mode: str) -> Iterator[None]:
    if mode == MODES[0]:
        yield
        return
    checking = checks._guard
    checks._guard = lambda spec: lambda roots: -1
    try:
        yield
    finally:
        checks._guard = checking


def _longest_check(model: torch.nn.Module, prompt: torch.Tensor) -> tuple[tuple, tuple]:
    """The values checked by the compiled program that checks the most, and the roots its prologue passed, seen
    while ``model`` makes two tokens."""
    seen: dict[int, tuple[tuple, tuple]] = {}
    checking = checks._guard

    def noting(spec: tuple):
        guard = checking(spec)

        def noted(roots: tuple) -> int:
            seen.setdefault(id(spec), (spec, roots))
            return guard(roots)

        return noted

    checks._guard = noting
    try:
        timed_tokens(model, prompt, 2, [])
    finally:
        checks._guard = checking
    return max(seen.values(), key=lambda seen: len(checks.decoded(seen[0])), default=((), ()))


@dataclass
class Result:
    per_token: dict[str, float]  # median seconds per new token of a generate call
    step: dict[str, float]  # median seconds of a new token (a decode step)
    checks: int  # values checked by the compiled program that checks the most
    guard_s: float  # one check of all of them, alone
    same_tokens: bool


def measure(config: Config, device: torch.device, quick: bool) -> Result:
    name, layers = config
    if device.type != "cpu":
        raise ValueError("the guard_cost case runs on the CPU")
    model = build(name, layers, EXT)
    prompt = torch.randint(0, vocabulary(name), (PROMPT,), generator=torch.Generator().manual_seed(0))
    first: list[int] = []
    status(f"compiling {name} ({layers} layers)")
    with gc_paused():
        timed_tokens(model, prompt, NEW, first)
    per_token: dict[str, list[float]] = {m: [] for m in MODES}
    steps: dict[str, list[float]] = {m: [] for m in MODES}
    same = True
    for _ in range(2 if quick else ROUNDS):
        for mode in MODES:
            status(f"{name}: generate, {mode}")
            tokens: list[int] = []
            with _guards(mode):
                took = timed_tokens(model, prompt, NEW, tokens)
            per_token[mode].append(sum(took) / NEW)
            steps[mode].extend(took[1:])
            same &= tokens == first
    (spec, roots), guard_s = _longest_check(model, prompt), 0.0
    if spec:
        guard = checks._guard(spec)
        with compile_data_and_stats(thunder.compile_data(model), thunder.compile_stats(model)):  # as the prologue
            start = time.perf_counter()
            for _ in range(100):
                guard(roots)
            guard_s = (time.perf_counter() - start) / 100
    return Result({m: statistics.median(v) for m, v in per_token.items()},
                  {m: statistics.median(v) for m, v in steps.items()}, len(checks.decoded(spec)), guard_s,
                  same)  # fmt: skip


def report(results: dict[Config, Result]) -> Table:
    on, off = MODES
    table = Table(
        name="guard_cost",
        title="The Python guards' cost per call: generate and decode steps with the check on and off",
        setup=(
            f"litgpt's `generate_fn`, greedy, {PROMPT}-token prompt, {NEW} new tokens, max_seq_length 2048, batch 1, "
            "`thunder_ext.jit` with `thunder_ext.set_kv_cache` (the growing cache), the same compiled programs with "
            f"the guard's check on and off by turns ({ROUNDS} generate calls each, after one that compiles). Off: "
            "the check passes without reading anything (the prologue still calls it). Per token: median of a call's "
            "wall time over its new tokens; decode step: median time of a new token after the first. Values checked "
            "and guard alone: the compiled program that checks the most, one check of all its values."
        ),
        columns=["model", "layers", f"per token ms ({on} / {off})", "per token on / off",
                 f"decode step ms ({on} / {off})", "decode step on / off", "values checked", "guard alone ms",
                 "tokens equal"],  # fmt: skip
    )
    for (name, layers), r in results.items():
        table.rows.append([name, str(layers), f"{r.per_token[on] * 1e3:.2f} / {r.per_token[off] * 1e3:.2f}",
                           ratio(r.per_token[on], r.per_token[off]),
                           f"{r.step[on] * 1e3:.2f} / {r.step[off] * 1e3:.2f}", ratio(r.step[on], r.step[off]),
                           str(r.checks), f"{r.guard_s * 1e3:.3f}", "yes" if r.same_tokens else "NO"])  # fmt: skip
        for what, values in (("per token of generate", r.per_token), ("decode step", r.step)):
            table.targets.append(Target(f"{name}: the guards cost at most 2% per call ({what})",
                                        ratio(values[on], values[off]), values[on] <= LIMIT * values[off]))  # fmt: skip
    return table
