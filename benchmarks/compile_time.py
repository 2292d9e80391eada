"""Compile time as a user meets it: litgpt's own ``generate`` from a cold start, each runner in a fresh process.

Models: SmolLM2-135M's litgpt config (``Config.from_name("SmolLM2-135M")``: 30 layers, random weights) and the
demo model (4 layers); and SmolLM2's config cut to 4, 8, 16 and 30 layers and grown to 80 (Llama-2-70B's depth), for
how compile time grows with depth.
Runners, as their users run them: eager (litgpt passes ``input_pos_maxp1``), stock ``thunder.jit``,
``thunder_ext.jit`` with the growing cache (as it compiles by default: each repeated block one call of its program,
compiled once; with ``block_programs=False``, each block's ops replayed into the model's trace; and, in the sweep and
on the demo model, neither, every block interpreted), the same with thunder's torch.compile executor (by default
replayed, and with ``block_programs=True``), and ``torch.compile(model, dynamic=True)``.

A run: the model built and compiled-wrapped, then ``generate`` of a 16-token prompt and 512 new tokens at
``max_seq_length`` 2048, each token timed as it comes (litgpt's ``generate_fn``), then a 300-token prompt (a new
length bucket) and 8 new tokens. A token that takes far longer than the runner's steady token is a compilation
event (the first: the prefill's; the second: the decode step's; later: a growth, a new bucket, a recompilation);
the extension's runners also log what each compiled. The sweep's runs stop at the first token, the prefill's.

HF transformers' Llama of SmolLM2-135M's shape (random weights): HF's own ``generate`` of one new token (the prefill,
its compilation included) from a cold start, eager, through the extension's recipe (``HFTransformersRecipe`` with the
plugin, its default growing cache) and under ``torch.compile(model.forward, dynamic=True)`` (HF's default cache).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from thunder_ext.benchmarks.measure import configure_inductor, gc_paused, status
from thunder_ext.benchmarks.report import Table, Target, figure, ratio, save

PROMPT, NEW, MAX_SEQ_LENGTH = 16, 512, 2048
SECOND_PROMPT, SECOND_NEW = 300, 8
SWEEP = (4, 8, 16, 30, 80)
EAGER, STOCK, DYNAMIC = "eager", "thunder.jit", "torch.compile(dynamic=True)"
EXT, EXT_NO_REPLAY = "thunder_ext.jit, growing cache", "thunder_ext.jit, growing cache, replay off"
EXT_TC = "thunder_ext.jit + torch.compile ex, growing cache"
EXT_REPLAYED = "thunder_ext.jit, growing cache, block programs off"
EXT_TC_PROGRAMS = "thunder_ext.jit + torch.compile ex, growing cache, block programs"
# the compile_ahead case's: the compile cache on, in a new empty folder, and the larger buckets compiled ahead
EXT_AHEAD = "thunder_ext.jit, growing cache, compiled ahead"
RUNNERS = (EAGER, STOCK, EXT, EXT_NO_REPLAY, EXT_REPLAYED, EXT_TC, EXT_TC_PROGRAMS, DYNAMIC)
COMPILING = tuple(r for r in RUNNERS if r != EAGER)
HF_MODEL, HF_RECIPE = "HF Llama, SmolLM2-135M's shape", "HFTransformersRecipe + plugin, default (growing)"
HF_RECIPE_INLINED = "HFTransformersRecipe + plugin, default (growing), block programs off"

Config = tuple[str, int, str]  # (model, layers, "generate", "sweep" or "hf")


def configs(quick: bool) -> list[Config]:
    if quick:
        return [("demo", 4, "generate"), ("SmolLM2-135M", 2, "sweep")]
    return [("SmolLM2-135M", 30, "generate"), ("demo", 4, "generate"), *(("SmolLM2-135M", n, "sweep") for n in SWEEP),
            (HF_MODEL, 30, "hf")]  # fmt: skip


def runners_of(config: Config) -> tuple[str, ...]:
    """The full generate without replay on the demo model only: on 30 layers each of its compilations takes minutes,
    and the sweep measures its first token. The sweep's 30 layers run that runner alone: the full run has the
    others' first tokens. Its 80 layers run the replaying runners alone, for how their compile time grows past 30:
    the runners that interpret or Inductor-compile every layer take many minutes there, and the sweep to 30
    already shows how they grow."""
    model, layers, what = config
    if what == "hf":
        return (EAGER, HF_RECIPE, HF_RECIPE_INLINED, DYNAMIC)
    if what == "sweep":
        return {30: (EXT_NO_REPLAY,), 80: (EXT, EXT_REPLAYED, EXT_TC_PROGRAMS)}.get(layers, COMPILING)
    return RUNNERS if model == "demo" else tuple(r for r in RUNNERS if r != EXT_NO_REPLAY)


@dataclass
class Run:
    setup_s: float  # building the model and what compiles it (no compilation yet)
    token_s: list[float]  # wall time of each new token as generate yields it, the prompt's prefill in the first
    second_s: list[float]  # the same for the second prompt's tokens
    logged: list[str]  # what the extension logged it compiled
    tokens: list[int]

    @property
    def steady_s(self) -> float:
        """The median token, compilations aside."""
        return statistics.median(self.token_s[len(self.token_s) // 2 :])

    def events(self) -> list[tuple[str, float]]:
        """``(what, seconds)`` of each token that stalled on a compilation: over 10 steady tokens and 0.5 s."""
        steady, found = self.steady_s, []
        for k, s in enumerate(self.token_s):
            if s > max(10 * steady, 0.5):
                what = "prefill" if k == 0 else "decode" if k == 1 else f"token {k}"
                found.append((what, s - steady))
        found += [(f"new length bucket, token {k}", s - steady) for k, s in enumerate(self.second_s)
                  if s > max(10 * steady, 0.5)]  # fmt: skip
        return found

    @property
    def wall_s(self) -> float:
        """From a cold start to the last of the first prompt's new tokens."""
        return self.setup_s + sum(self.token_s)


@dataclass
class Result:
    runs: dict[str, Run] = field(default_factory=dict)


def build(model: str, layers: int, runner: str) -> torch.nn.Module:
    """The model as ``runner`` runs it, with its cache (nothing compiled before its first call)."""
    import thunder
    from litgpt import GPT, Config
    from thunder.executors.torch_compile import torch_compile_ex

    import thunder_ext
    from thunder_ext.tools.demo_model import small_model

    torch.manual_seed(0)
    if model == "demo":
        gpt = small_model(MAX_SEQ_LENGTH)
    else:
        gpt = GPT(Config.from_name(model, n_layer=layers)).eval()
        gpt.max_seq_length = MAX_SEQ_LENGTH
    if runner in (EXT_TC, EXT_TC_PROGRAMS, DYNAMIC):
        configure_inductor()
    with_inductor = [torch_compile_ex, *thunder.get_default_executors()]
    wrapped = {
        EAGER: lambda: gpt,
        STOCK: lambda: thunder.jit(gpt),
        EXT: lambda: thunder_ext.jit(gpt),
        EXT_AHEAD: lambda: thunder_ext.jit(gpt),
        EXT_NO_REPLAY: lambda: thunder_ext.jit(gpt, replay_blocks=False),
        EXT_REPLAYED: lambda: thunder_ext.jit(gpt, block_programs=False),
        EXT_TC: lambda: thunder_ext.jit(gpt, executors=with_inductor),
        EXT_TC_PROGRAMS: lambda: thunder_ext.jit(gpt, block_programs=True, executors=with_inductor),
        DYNAMIC: lambda: torch.compile(gpt, dynamic=True),
    }[runner]()
    if runner in (EXT, EXT_NO_REPLAY, EXT_REPLAYED, EXT_TC, EXT_TC_PROGRAMS, EXT_AHEAD):
        thunder_ext.set_kv_cache(wrapped, batch_size=1, compile_ahead=runner == EXT_AHEAD)
    else:
        gpt.set_kv_cache(batch_size=1)
    return wrapped


def timed_tokens(model: torch.nn.Module, prompt: torch.Tensor, new: int, tokens: list[int]) -> list[float]:
    """litgpt's ``generate_fn``, greedy: the wall time of each new token as it comes; the tokens go to ``tokens``."""
    from litgpt.generate.base import generate_fn

    took, last = [], time.perf_counter()
    stream = generate_fn(model, prompt, prompt.shape[0] + new, temperature=0.0, include_prompt=False, include_eos=True)
    for token in stream:
        now = time.perf_counter()
        took.append(now - last)
        tokens.append(int(token))
        last = now
    return took


def logged_messages() -> list[str]:
    """The list that every message of the extension's log goes to from now on."""
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())
    logging.getLogger("thunder_ext").addHandler(handler)
    return logged


def vocabulary(model: str) -> int:
    return 1024 if model == "demo" else 49152


def _run(model: str, layers: int, runner: str, new: int, second: bool, threads: int) -> Run:
    torch.set_num_threads(threads)
    # a cold start: Inductor's caches on disk empty (it reads the folder when it compiles), as the extension's
    # compile cache is (on, in an empty folder, for the runner that compiles ahead; off for the others, here and not
    # only under the suite: the cache is on by default, and a direct call saved entries for the next to load)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
    os.environ["THUNDER_EXT_CACHE"] = "1" if runner == EXT_AHEAD else "0"
    if runner == EXT_AHEAD:
        os.environ["THUNDER_EXT_CACHE_DIR"] = tempfile.mkdtemp()
    logged = logged_messages()
    start = time.perf_counter()
    compiled = build(model, layers, runner)
    setup = time.perf_counter() - start
    tokens: list[int] = []
    vocab = vocabulary(model)
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode(), gc_paused():  # compilations throughout (measure.gc_paused says why)
        first = timed_tokens(compiled, torch.randint(0, vocab, (PROMPT,), generator=g), new, tokens)
        more = torch.randint(0, vocab, (SECOND_PROMPT,), generator=g)
        later = timed_tokens(compiled, more, SECOND_NEW, tokens) if second else []
    kept = [m for m in logged if m.startswith(("thunder_ext: compiled", "thunder_ext: waited")) or "traced" in m]
    return Run(setup, first, later, kept, tokens)


def hf_llama(layers: int) -> torch.nn.Module:
    """HF's Llama with SmolLM2-135M's shape (its litgpt config's sizes), random weights, float32."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                                      num_attention_heads=9, num_key_value_heads=3, vocab_size=vocabulary("SmolLM2-135M"),
                                      max_position_embeddings=MAX_SEQ_LENGTH, rope_theta=100000.0,
                                      tie_word_embeddings=True)  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def build_hf(layers: int, runner: str) -> torch.nn.Module:
    """``hf_llama`` as ``runner`` runs it: eager, through the extension's recipe (``HF_RECIPE``, whose decoder layers
    call one block program; ``HF_RECIPE_INLINED``, their ops inlined), or its forward under
    ``torch.compile(dynamic=True)`` (``DYNAMIC``)."""
    import thunder

    import thunder_ext

    hf = hf_llama(layers)
    if runner in (HF_RECIPE, HF_RECIPE_INLINED):
        plugin = thunder_ext.Inplace(block_programs=False if runner == HF_RECIPE_INLINED else None)
        return thunder.compile(hf, recipe=thunder_ext.HFTransformersRecipe(), plugins=[plugin])
    if runner == DYNAMIC:
        configure_inductor()
        hf.forward = torch.compile(hf.forward, dynamic=True)
    return hf


def first_hf_token(hf: torch.nn.Module) -> tuple[float, list[int]]:
    """HF's ``generate`` of one new token after a ``PROMPT``-token prompt: its seconds, and the token."""
    ids = torch.randint(0, vocabulary("SmolLM2-135M"), (1, PROMPT), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), gc_paused():
        start = time.perf_counter()
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, min_new_tokens=1, do_sample=False)
        return time.perf_counter() - start, out[0, PROMPT:].tolist()


def _run_hf(layers: int, runner: str, threads: int) -> Run:
    """``_run``'s measurement for HF's Llama and its ``generate``, to the first new token only."""
    torch.set_num_threads(threads)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()  # a cold start, as ``_run``'s
    os.environ["THUNDER_EXT_CACHE"] = "0"
    logged = logged_messages()
    start = time.perf_counter()
    hf = build_hf(layers, runner)
    setup = time.perf_counter() - start
    first, tokens = first_hf_token(hf)
    kept = [m for m in logged if m.startswith("thunder_ext: compiled") or "traced" in m]
    return Run(setup, [first], [], kept, tokens)


def in_fresh_process(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a new Python process (spawned: it inherits no thread and no state of this one)."""
    pool = multiprocessing.get_context("spawn").Pool(1)
    try:
        return pool.apply(fn, args)
    finally:  # let the process exit by itself (a terminated one leaves its semaphores to be warned about)
        pool.close()
        pool.join()


def measure(config: Config, device: torch.device, quick: bool) -> Result:
    if device.type != "cpu":
        raise ValueError("the compile case runs on the CPU")
    model, layers, what = config
    new = 1 if what in ("sweep", "hf") else (32 if quick else NEW)
    result = Result()
    for runner in runners_of(config):
        status(f"{runner}: {model} ({layers} layers), {PROMPT} + {new} tokens from a cold start, in a fresh process")
        threads = torch.get_num_threads()
        result.runs[runner] = (in_fresh_process(_run_hf, layers, runner, threads) if what == "hf" else
                               in_fresh_process(_run, model, layers, runner, new, what == "generate", threads))  # fmt: skip
    return result


def _first_token(run: Run) -> float:
    return run.token_s[0]


def _growths(run: Run) -> list[float]:
    """Seconds of each growth's stall (a compilation after the decode step's, during the first prompt)."""
    return [s for what, s in run.events() if what.startswith("token ")]


def report(results: dict[Config, Result]) -> Table:
    table = Table(
        name="compile_time",
        title="Compile time: litgpt's and HF's generate from a cold start",
        setup=(
            f"litgpt's own `generate`, greedy, batch 1, `max_seq_length` {MAX_SEQ_LENGTH}, each runner in a fresh "
            f"process: a {PROMPT}-token prompt and {NEW} new tokens (the sweep: 1), then a {SECOND_PROMPT}-token "
            f"prompt (a new length bucket) and {SECOND_NEW}. First token: from the generate call to the first new "
            "token (the prefill's compilation included). Events: tokens that stalled over 10 steady tokens, in "
            "seconds beyond a steady token. Cold start: building and wrapping the model, then the first prompt's "
            "whole generate. Per token: the median of the second half of the first prompt's tokens. HF's Llama: "
            "its own `generate` of one new token (the prefill) from a cold start."
        ),
        columns=["model", "layers", "runner", "first token s", "compilation events (s)", "cold start s",
                 "per token ms", "tokens as eager's"],  # fmt: skip
    )
    for (model, layers, what), result in results.items():
        eager = result.runs.get(EAGER)
        for runner, run in result.runs.items():
            events = ", ".join(f"{w} {s:.1f}" for w, s in run.events()) or "-"
            same = "-" if eager is None or runner == EAGER else "yes" if run.tokens == eager.tokens else "**no**"
            full, depth = what == "generate", f"{layers} (sweep)" if what == "sweep" else str(layers)
            table.rows.append([model, depth, runner, f"{_first_token(run):.1f}", events,
                               f"{run.wall_s:.1f}" if full else "-", f"{run.steady_s * 1e3:.2f}" if full else "-",
                               same])  # fmt: skip
        for runner, run in result.runs.items():
            table.notes += [f"{model} ({layers} layers), {runner}: {m}" for m in run.logged if "traced" in m][:2]
    table.targets = _targets(results)
    table.plot = lambda path, machine: _plot(path, machine, results)
    return table


def _sweep(results: dict[Config, Result]) -> dict[str, dict[int, float]]:
    """runner -> layers -> seconds to the first token, from the sweep (30 layers from the full run where the sweep
    has none)."""
    by_runner: dict[str, dict[int, float]] = {}
    for (model, layers, what), result in results.items():
        if model == "SmolLM2-135M":
            for runner, run in result.runs.items():
                if runner != EAGER and (what == "sweep" or layers not in by_runner.get(runner, {})):
                    by_runner.setdefault(runner, {})[layers] = _first_token(run)
    return by_runner


def _grows(sweep: dict[int, float], runner: str, deep: int, shallow: int) -> list[Target]:
    """Issue 61's depth target: the first token at ``deep`` layers at most 1.3x that at ``shallow``."""
    if deep not in sweep or shallow not in sweep:
        return []
    grows = sweep[deep] / sweep[shallow]
    return [Target(f"SmolLM2-135M, {runner}: first token at {deep} layers at most 1.3x that at {shallow}",
                   f"{grows:.2f}x ({sweep[deep]:.1f} s / {sweep[shallow]:.1f} s)", grows <= 1.3)]  # fmt: skip


def _targets(results: dict[Config, Result]) -> list[Target]:
    sweep = _sweep(results).get(EXT, {})
    targets = _grows(sweep, EXT, 30, 4) + _grows(sweep, EXT, 80, 30)
    full = results.get(("SmolLM2-135M", 30, "generate"))
    if full is not None and EXT in full.runs and DYNAMIC in full.runs:
        ext, dyn = full.runs[EXT], full.runs[DYNAMIC]
        targets.append(Target(f"SmolLM2-135M: first token under {EXT} at most 0.1x {DYNAMIC}'s",
                              ratio(_first_token(ext), _first_token(dyn)), _first_token(ext) <= 0.1 * _first_token(dyn)))
        worst = max(_growths(ext), default=0.0)
        targets.append(Target(f"SmolLM2-135M, {EXT}: each growth of the cache stalls at most 5 s",
                              f"{worst:.1f} s (the longest of {len(_growths(ext))})", worst <= 5))
        eager = full.runs[EAGER]
        targets.append(Target(f"SmolLM2-135M: cold start of {PROMPT} + {NEW} tokens under {EXT} at most 0.5x "
                              f"{DYNAMIC}'s (eager: {eager.wall_s:.1f} s)", ratio(ext.wall_s, dyn.wall_s),
                              ext.wall_s <= 0.5 * dyn.wall_s))  # fmt: skip
        targets.append(Target(f"SmolLM2-135M: {EXT} per token within 2% of eager's",
                              ratio(ext.steady_s, eager.steady_s), ext.steady_s <= 1.02 * eager.steady_s))
        if EXT_REPLAYED in full.runs:  # issue 61: a block program costs no time per token
            replayed = full.runs[EXT_REPLAYED]
            targets.append(Target(f"SmolLM2-135M: {EXT} per token within 2% of {EXT_REPLAYED}'s",
                                  ratio(ext.steady_s, replayed.steady_s), ext.steady_s <= 1.02 * replayed.steady_s))
    for runner in (EXT_TC, EXT_TC_PROGRAMS):
        if full is not None and runner in full.runs and DYNAMIC in full.runs:
            tc, dyn = full.runs[runner], full.runs[DYNAMIC]
            targets.append(Target(f"SmolLM2-135M: first token under {runner} at most 0.25x {DYNAMIC}'s",
                                  ratio(_first_token(tc), _first_token(dyn)),
                                  _first_token(tc) <= 0.25 * _first_token(dyn)))  # fmt: skip
            targets.append(Target(f"SmolLM2-135M: {runner} per token at most 1.05x {DYNAMIC}'s",
                                  ratio(tc.steady_s, dyn.steady_s), tc.steady_s <= 1.05 * dyn.steady_s))
    demo = results.get(("demo", 4, "generate"))
    if demo is not None and EXT in demo.runs and EXT_NO_REPLAY in demo.runs:
        on, off = demo.runs[EXT].steady_s, demo.runs[EXT_NO_REPLAY].steady_s
        targets.append(Target(f"demo model: {EXT} per token within 2% of the same without replay",
                              ratio(on, off), on <= 1.02 * off))
    if demo is not None and EXT_NO_REPLAY in demo.runs and STOCK in demo.runs:  # the extension's passes' own cost
        ext, stock = _first_token(demo.runs[EXT_NO_REPLAY]), _first_token(demo.runs[STOCK])
        targets.append(Target(f"demo model: first token under {EXT_NO_REPLAY} at most 1.1x {STOCK}'s",
                              ratio(ext, stock), ext <= 1.1 * stock))
    hf = results.get((HF_MODEL, 30, "hf"))
    for runner in (HF_RECIPE, HF_RECIPE_INLINED):
        if hf is not None and runner in hf.runs and DYNAMIC in hf.runs:
            recipe, dyn = _first_token(hf.runs[runner]), _first_token(hf.runs[DYNAMIC])
            targets.append(Target(f"{HF_MODEL}: first token under {runner} at most 0.25x {DYNAMIC}'s",
                                  ratio(recipe, dyn), recipe <= 0.25 * dyn))
    differ = [f"{m} {r}" for (m, _, w), res in results.items() if w in ("generate", "hf") and EAGER in res.runs
              for r, run in res.runs.items() if run.tokens != res.runs[EAGER].tokens]  # fmt: skip
    targets.append(Target("every runner's tokens equal eager's", "all" if not differ else "not: " + ", ".join(differ),
                          not differ))
    return targets


def _plot(path: Path, machine: str, results: dict[Config, Result]) -> None:
    fig, (ax,) = figure("SmolLM2-135M's config: seconds to the first token against depth", machine)
    for runner, by_layers in _sweep(results).items():
        layers = sorted(by_layers)
        ax.plot(layers, [by_layers[n] for n in layers], marker="o", label=runner)
    ax.set(xlabel="n_layer", ylabel="seconds to the first token (compilation included)", yscale="log")
    ax.set_xticks(list(SWEEP), [str(n) for n in SWEEP])
    ax.legend(fontsize=7)
    save(fig, path)
