"""Warm starts: a second process that makes the same compilations, with the compile cache the first one filled.

Models: the demo model (4 layers) and SmolLM2-135M's litgpt config (30 layers, random weights). Runners, each
twice in a fresh process, cold (its caches empty) then warm (what the cold process left): eager (litgpt's
``input_pos_maxp1``), ``thunder_ext.jit`` with the growing cache (the compile cache in a folder of the run's own;
each entry holds the block programs it calls; on SmolLM2 also a third start, after a process of the same config at
``SHALLOWER`` layers filled the cache: the deeper model has no entry of its own, and loads the block programs the
shallower one stored), the same with ``block_programs=False`` (each block's ops in the model's entry), the same with
thunder's torch.compile executor (its entries hold the text of each Inductor region, compiled again when loaded), and
``torch.compile(model, dynamic=True)`` (Inductor's caches, as torch.compile keeps them on disk, in a folder of
the run's own). A run: litgpt's ``generate`` of a 16-token prompt and 128 new tokens at ``max_seq_length`` 2048.
And HF transformers' Llama of SmolLM2-135M's shape: HF's own ``generate`` of one new token through the extension's
recipe (``HFTransformersRecipe`` with the plugin), and under ``torch.compile(model.forward, dynamic=True)``.

First token: from building the model and what compiles it (after the imports, which every runner pays alike and
the table gives apart) to the first new token: loading the compile cache is in it. Whole run: the same to the last
token.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from thunder_ext.benchmarks.compile_time import (
    DYNAMIC,
    EAGER,
    EXT,
    EXT_REPLAYED,
    EXT_TC,
    HF_RECIPE,
    MAX_SEQ_LENGTH,
    PROMPT,
    build,
    build_hf,
    first_hf_token,
    in_fresh_process,
    logged_messages,
    timed_tokens,
    vocabulary,
)
from thunder_ext.benchmarks.measure import gc_paused, status
from thunder_ext.benchmarks.report import Table, Target, ratio

NEW = 128
RUNNERS = (EAGER, EXT, EXT_REPLAYED, EXT_TC, DYNAMIC)
HF = "HF Llama, SmolLM2-135M's shape"
HF_RUNNERS = (EAGER, HF_RECIPE, DYNAMIC)
STARTS = ("cold", "warm")
SHALLOWER = 4  # the depth whose block programs the model loads in its third start
AFTER_SHALLOWER = f"after {SHALLOWER} layers"
# the targets: seconds to a warm first token
WARM_FIRST_TOKEN_S = {"SmolLM2-135M": 5.0, "demo": 2.0}

Config = tuple[str, int]
COLUMNS = ["model", "runner", "start", "imports s", "first token s", "whole run s", "per token ms", "tokens as eager's",
           "what the extension logged"]  # fmt: skip


def configs(quick: bool) -> list[Config]:
    return [("demo", 4)] if quick else [("demo", 4), ("SmolLM2-135M", 30), (HF, 30)]


@dataclass
class Run:
    import_s: float  # thunder, litgpt and the extension
    setup_s: float  # the model built and wrapped; the extension's cache entries loaded
    token_s: list[float]
    tokens: list[int]
    logged: list[str]

    @property
    def first_token_s(self) -> float:
        return self.setup_s + self.token_s[0]

    @property
    def whole_s(self) -> float:
        return self.setup_s + sum(self.token_s)

    @property
    def steady_s(self) -> float:
        return statistics.median(self.token_s[len(self.token_s) // 2 :])


@dataclass
class Result:
    runs: dict[tuple[str, str], Run] = field(default_factory=dict)  # (runner, start) -> run


def _caches_in(cache_dir: str) -> None:
    """Inductor's and the extension's caches in ``cache_dir``: set before anything imports either, as both read
    their folders from the environment."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(cache_dir) / "inductor")
    os.environ["THUNDER_EXT_CACHE"], os.environ["THUNDER_EXT_CACHE_DIR"] = "1", str(Path(cache_dir) / "thunder_ext")


def _run(model: str, layers: int, runner: str, new: int, threads: int, cache_dir: str) -> Run:
    start = time.perf_counter()
    _caches_in(cache_dir)
    import litgpt.generate.base  # noqa: F401  (what generate imports, imported before the clock starts)
    import thunder  # noqa: F401

    import thunder_ext  # noqa: F401

    torch.set_num_threads(threads)
    logged = logged_messages()
    imported = time.perf_counter()
    compiled = build(model, layers, runner)
    setup = time.perf_counter() - imported
    tokens: list[int] = []
    prompt = torch.randint(0, vocabulary(model), (PROMPT,), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode(), gc_paused():
        took = timed_tokens(compiled, prompt, new, tokens)
    kept = [m for m in logged if m.startswith(("thunder_ext: compiled", "thunder_ext: loaded"))]
    return Run(imported - start, setup, took, tokens, kept)


def _run_hf(layers: int, runner: str, threads: int, cache_dir: str) -> Run:
    """``_run``'s measurement for HF's Llama and its ``generate``, to the first new token only."""
    start = time.perf_counter()
    _caches_in(cache_dir)
    import thunder  # noqa: F401
    import transformers  # noqa: F401

    import thunder_ext  # noqa: F401

    torch.set_num_threads(threads)
    logged = logged_messages()
    imported = time.perf_counter()
    hf = build_hf(layers, runner)
    setup = time.perf_counter() - imported
    first, tokens = first_hf_token(hf)
    kept = [m for m in logged if m.startswith(("thunder_ext: compiled", "thunder_ext: loaded"))]
    return Run(imported - start, setup, [first], tokens, kept)


def measure(config: Config, device: torch.device, quick: bool) -> Result:
    if device.type != "cpu":
        raise ValueError("the warm_start case runs on the CPU")
    model, layers = config
    new = 16 if quick else NEW
    result = Result()
    threads = torch.get_num_threads()
    for runner in HF_RUNNERS if model == HF else RUNNERS:
        with tempfile.TemporaryDirectory(prefix="thunder-ext-warm-start-") as caches:
            for start in STARTS:
                if model == HF:
                    status(f"{runner}: {model} ({layers} layers), {PROMPT} + 1 token, {start}, in a fresh process")
                    result.runs[runner, start] = in_fresh_process(_run_hf, layers, runner, threads, caches)
                    continue
                status(f"{runner}: {model} ({layers} layers), {PROMPT} + {new} tokens, {start}, in a fresh process")
                result.runs[runner, start] = in_fresh_process(_run, model, layers, runner, new, threads, caches)
    if model == "SmolLM2-135M":  # the demo model's depth is fixed; HF's model has no block programs
        with tempfile.TemporaryDirectory(prefix="thunder-ext-warm-start-") as caches:
            status(f"{EXT}: {model} ({layers} layers) {AFTER_SHALLOWER}, in fresh processes")
            in_fresh_process(_run, model, SHALLOWER, EXT, new, threads, caches)
            result.runs[EXT, AFTER_SHALLOWER] = in_fresh_process(_run, model, layers, EXT, new, threads, caches)
    return result


def report(results: dict[Config, Result]) -> Table:
    table = Table(
        name="warm_start",
        title="Warm starts: a second process with the caches the first one left",
        setup=(
            f"litgpt's own `generate`, greedy, batch 1, `max_seq_length` {MAX_SEQ_LENGTH}, a {PROMPT}-token prompt "
            f"and {NEW} new tokens; each runner twice, each time in a fresh process: cold (its caches empty), then "
            "warm (the caches the cold process left: thunder_ext's compile cache; Inductor's FX graph and AOTAutograd "
            f"caches, on disk as torch.compile keeps them); under {EXT}, also {AFTER_SHALLOWER} (a fresh cache "
            f"that a process of the same config at {SHALLOWER} layers filled). First token: from building the model "
            "and wrapping it (loading the compile cache included) to the first new token. Whole run: the same to the "
            "last token. Imports: thunder, litgpt and the extension (torch is imported before), before either."
        ),
        columns=COLUMNS,
    )
    for (model, layers), result in results.items():
        eager = result.runs.get((EAGER, "cold"))
        for (runner, start), run in result.runs.items():
            same = "-" if eager is None or run is eager else "yes" if run.tokens == eager.tokens else "**no**"
            did = _summary(run.logged)
            table.rows.append([f"{model} ({layers} layers)", runner, start, f"{run.import_s:.1f}",
                               f"{run.first_token_s:.1f}", f"{run.whole_s:.1f}", per_token(run), same,
                               did])  # fmt: skip
    table.targets = _targets(results)
    return table


def per_token(run: Run) -> str:
    """The steady token's milliseconds, where more than one token was timed."""
    return f"{run.steady_s * 1e3:.2f}" if len(run.token_s) > 1 else "-"


def _summary(logged: list[str]) -> str:
    """How many compilations the compile cache saved (or could not) and loaded, and the seconds its loads spent
    checking the model's Python state (the guard's digest); and the block programs it saved and loaded apart: its
    own log lines."""
    cached = [m for m in logged if m.startswith("thunder_ext: loaded") or "compile cache" in m]
    blocks = Counter(m.split()[1] for m in cached if m.split()[2].startswith("block_"))
    compiled = sum(m.startswith("thunder_ext: compiled") for m in cached) - blocks["compiled"]
    loaded = sum(m.startswith("thunder_ext: loaded") and " for " not in m for m in cached) - blocks["loaded"]
    checked = sum(float(s) for m in logged for s in re.findall(r"its Python state checked in ([\d.]+) s", m))
    if not compiled and not loaded and not blocks:
        return "-"
    said = f"{compiled} compiled, {loaded} loaded" + (f" (state checked in {checked:.2f} s)" if loaded else "")
    return said + (f"; block programs: {blocks['compiled']} compiled, {blocks['loaded']} loaded" if blocks else "")


def _targets(results: dict[Config, Result]) -> list[Target]:
    targets = []
    for (model, layers), result in results.items():
        warm, dynamic = result.runs.get((EXT, "warm")), result.runs.get((DYNAMIC, "warm"))
        if warm is None:
            continue
        limit = WARM_FIRST_TOKEN_S[model]
        targets.append(Target(f"{model}: warm first token under {EXT} within {limit:.0f} s",
                              f"{warm.first_token_s:.1f} s", warm.first_token_s <= limit))  # fmt: skip
        if dynamic is not None:
            targets.append(Target(f"{model}: warm first token under {EXT} at most 0.5x {DYNAMIC}'s warm",
                                  ratio(warm.first_token_s, dynamic.first_token_s),
                                  warm.first_token_s <= 0.5 * dynamic.first_token_s))  # fmt: skip
    differ = [f"{model} {runner} {start}" for (model, _), res in results.items() if (EAGER, "cold") in res.runs
              for (runner, start), run in res.runs.items() if run.tokens != res.runs[EAGER, "cold"].tokens]  # fmt: skip
    targets.append(Target("every run's tokens equal eager's, cold and warm",
                          "all" if not differ else "not: " + ", ".join(differ), not differ))  # fmt: skip
    return targets
