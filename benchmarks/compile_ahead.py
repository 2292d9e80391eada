"""Growths from a cold start, with the larger buckets compiled ahead by a second process or not.

The compile case's run (``compile_time.py``: litgpt's own ``generate``, each runner in a fresh process, a 16-token
prompt and 512 new tokens at ``max_seq_length`` 2048, then a 300-token prompt in a new length bucket) for the
runners that issue 39's growth and cold-start targets compare: eager as litgpt runs it, ``thunder_ext.jit`` with the
growing cache compiling each bucket when reached (the compile cache off, as the compile case runs it), the same
with the compile cache on in an empty folder, so that a second process compiles the larger buckets ahead
(``set_kv_cache``'s rule 8; it runs on a second core), and ``torch.compile(model, dynamic=True)``.
"""

from __future__ import annotations

import torch

from thunder_ext.benchmarks.compile_time import (
    DYNAMIC,
    EAGER,
    EXT,
    EXT_AHEAD,
    NEW,
    PROMPT,
    Config,
    Result,
    Run,
    _growths,
    _run,
    in_fresh_process,
)
from thunder_ext.benchmarks.compile_time import report as compile_report
from thunder_ext.benchmarks.measure import status
from thunder_ext.benchmarks.report import Table, Target, ratio

RUNNERS = (EAGER, EXT, EXT_AHEAD, DYNAMIC)


def configs(quick: bool) -> list[Config]:
    return [("demo", 4, "generate")] if quick else [("SmolLM2-135M", 30, "generate"), ("demo", 4, "generate")]


def measure(config: Config, device: torch.device, quick: bool) -> Result:
    if device.type != "cpu":
        raise ValueError("the compile_ahead case runs on the CPU")
    model, layers, _ = config
    new = 32 if quick else NEW
    result = Result()
    for runner in RUNNERS:
        status(f"{runner}: {model} ({layers} layers), {PROMPT} + {new} tokens from a cold start, in a fresh process")
        result.runs[runner] = in_fresh_process(_run, model, layers, runner, new, True, torch.get_num_threads())
    return result


def report(results: dict[Config, Result]) -> Table:
    table = compile_report(results)
    table.name, table.title = "compile_ahead", "Growths from a cold start, compiled ahead or not"
    table.setup += f" The runner '{EXT_AHEAD}' has the compile cache on, in an empty folder: its second process runs on a second core."
    table.notes = [f"{m}, {r}: {line}" for (m, _, _), res in results.items() for r, run in res.runs.items()
                   for line in run.logged if "ahead" in line or "waited" in line]  # fmt: skip
    table.targets = [t for config, result in results.items() for t in _targets(config, result)]
    table.plot = None
    return table


def _targets(config: Config, result: Result) -> list[Target]:
    model = config[0]
    ahead, behind, dyn, eager = (result.runs.get(r) for r in (EXT_AHEAD, EXT, DYNAMIC, EAGER))
    worst = max(_growths(ahead), default=0.0)
    return [
        Target(f"{model}, {EXT_AHEAD}: each growth of the cache stalls at most 10 s",
               f"{worst:.1f} s (the longest of {len(_growths(ahead))}; compiled when reached: "
               f"{max(_growths(behind), default=0.0):.1f} s)", worst <= 10),
        Target(f"{model}: cold start of {PROMPT} + {NEW} tokens under {EXT_AHEAD} at most 0.5x {DYNAMIC}'s (compiled "
               f"when reached: {ratio(behind.wall_s, dyn.wall_s)}; eager: {eager.wall_s:.1f} s)",
               ratio(ahead.wall_s, dyn.wall_s), ahead.wall_s <= 0.5 * dyn.wall_s),
        Target(f"{model}: {EXT_AHEAD} per token within 2% of {EXT}'s", ratio(ahead.steady_s, behind.steady_s),
               ahead.steady_s <= 1.02 * behind.steady_s),
        Target(f"{model}: tokens of both prompts equal eager's, compiled ahead or not",
               "yes" if _same(ahead, eager) and _same(behind, eager) else "no",
               _same(ahead, eager) and _same(behind, eager)),
    ]  # fmt: skip


def _same(run: Run, eager: Run) -> bool:
    return run.tokens == eager.tokens
