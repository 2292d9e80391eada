"""litgpt's own ``generate``: a 16-token prompt, then 128 and 512 new tokens, greedy, batch 1, the demo's model
at several ``max_seq_length``, each runner as its users run it.

litgpt's ``generate`` passes ``input_pos_maxp1`` (attention over the positions written) to a model with no
``ThunderModule`` inside, and None to a thunder one, which then attends over its cache's whole capacity:
litgpt's cache holds ``max_seq_length`` positions from the first token, ``thunder_ext.set_kv_cache``'s a
bucket of what it holds. Per-token time is a ``generate`` call's wall time over its new tokens (the prompt's
prefill included), the runners taking turns call by call, after a first call of each that compiles.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
from dataclasses import dataclass
from pathlib import Path

import thunder
import torch
from thunder.executors.torch_compile import torch_compile_ex

import thunder_ext
from thunder_ext.benchmarks.measure import configure_inductor, gc_paused, seconds, status
from thunder_ext.benchmarks.report import Table, Target, mib, ms, plot_per_length, ratio
from thunder_ext.thunder026.compiled import compiled_module
from thunder_ext.tools.demo_model import small_model

PROMPT = 16
NEW_TOKENS = (128, 512)
EAGER, STOCK, EXT = "eager", "thunder.jit", "thunder_ext.jit"
GROWING, GROWING_TC = "thunder_ext.jit, growing cache", "thunder_ext.jit + torch.compile ex, growing cache"
# thunder.compile's default recipe (with thunder's default executors, as on a CPU): it prunes the prologue's
# checks of module members, which thunder_ext.jit keeps
GROWING_PLUGIN = 'thunder.compile(plugins="inplace"), growing cache'
DYNAMIC = "torch.compile(dynamic=True)"
RUNNERS = (EAGER, STOCK, EXT, GROWING, GROWING_PLUGIN, GROWING_TC, DYNAMIC)


def runner(name: str, base: torch.nn.Module) -> torch.nn.Module:
    """``base`` as ``name`` runs it, with its cache: litgpt's ``set_kv_cache`` or ``thunder_ext.set_kv_cache``."""
    model = copy.deepcopy(base)
    if name in (GROWING_TC, DYNAMIC):
        configure_inductor()
    if name == EAGER:
        compiled = model
    elif name == STOCK:
        compiled = thunder.jit(model)
    elif name in (EXT, GROWING):
        compiled = thunder_ext.jit(model)
    elif name == GROWING_TC:
        compiled = thunder_ext.jit(model, executors=[torch_compile_ex, *thunder.get_default_executors()])
    elif name == GROWING_PLUGIN:
        compiled = thunder.compile(model, recipe=thunder_ext.DefaultExecutorsRecipe(), plugins="inplace")
    elif name == DYNAMIC:
        compiled = torch.compile(model, dynamic=True)
    else:
        raise ValueError(f"unknown runner {name!r}; expected one of {RUNNERS}")
    if name in (GROWING, GROWING_PLUGIN, GROWING_TC):
        thunder_ext.set_kv_cache(compiled, batch_size=1)
    else:
        model.set_kv_cache(batch_size=1)
    return compiled


def prompt(length: int = PROMPT, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 1024, (length,), generator=torch.Generator().manual_seed(seed))


def generate(model: torch.nn.Module, tokens: torch.Tensor, new: int) -> torch.Tensor:
    from litgpt.generate.base import generate as litgpt_generate

    return litgpt_generate(model, tokens, tokens.shape[0] + new, temperature=0.0, include_prompt=False)


def compiled_so_far(name: str, model: torch.nn.Module) -> int:
    """A count that grows by one for each compilation of runner ``name``: a thunder runner's cache entries (the
    growth copy's included), the graphs Dynamo has compiled in this process for ``torch.compile``."""
    if name == DYNAMIC:
        return torch._dynamo.utils.counters["stats"]["unique_graphs"]
    if thunder.compile_data(model) is None:
        return 0
    grow = getattr(model.forward, "grow", None)
    return thunder.cache_misses(model) + (thunder.cache_misses(grow) if thunder.compile_data(grow) else 0)


def cache_sizes(model: torch.nn.Module) -> tuple[int, int, int]:
    """Bytes of the KV buffers (every layer's k and v), the positions they hold, and the bytes of the attention
    mask litgpt keeps beside them."""
    gpt = compiled_module(getattr(model, "_orig_mod", model))
    buffers = [t for block in gpt.transformer.h for t in (block.attn.kv_cache.k, block.attn.kv_cache.v)]
    return sum(t.nbytes for t in buffers), buffers[0].shape[2], gpt.mask_cache.nbytes


@dataclass
class Result:
    per_token: dict[str, float]  # median seconds of a generate call over its new tokens
    compiled: dict[str, int]  # thunder cache entries (growth copy included), Dynamo graphs
    kv_bytes: dict[str, int]  # largest KV buffers seen after a call
    positions: dict[str, int]  # the positions they hold
    mask_bytes: dict[str, int]
    same_tokens: dict[str, bool]  # every call's tokens equal eager's


def configs(quick: bool) -> list[tuple[int, int]]:
    lengths = (2048,) if quick else (2048, 8192, 32768)
    return [(length, new) for length in lengths for new in (NEW_TOKENS[:1] if quick else NEW_TOKENS)]


_models: dict[int, dict[str, torch.nn.Module]] = {}  # the runners of one max_seq_length, kept for its configs


def models(length: int) -> dict[str, torch.nn.Module]:
    if length not in _models:
        _models.clear()  # the previous length's runners and caches go
        base = small_model(length)
        _models[length] = {name: runner(name, base) for name in RUNNERS}
    return _models[length]


def measure(config: tuple[int, int], device: torch.device, quick: bool) -> Result:
    length, new = config
    if device.type != "cpu":
        raise ValueError("the generate case runs on the CPU (litgpt's generate of the demo model)")
    runners = models(length)
    tokens = prompt()
    expected = generate(runners[EAGER], tokens, new)
    per_call: dict[str, list[float]] = {name: [] for name in RUNNERS}
    compiled, same = dict.fromkeys(RUNNERS, 0), dict.fromkeys(RUNNERS, True)
    kv, positions, mask = dict.fromkeys(RUNNERS, 0), dict.fromkeys(RUNNERS, 0), dict.fromkeys(RUNNERS, 0)

    def call(name: str, timed: bool) -> None:
        status(f"{'timing' if timed else 'compiling and warming up'} {name}, {new} tokens")
        model = runners[name]
        before = compiled_so_far(name, model)
        with contextlib.nullcontext() if timed else gc_paused():
            out: list[torch.Tensor] = []
            took = seconds(lambda: out.append(generate(model, tokens, new)), device)
        if timed:
            per_call[name].append(took / new)
        same[name] &= torch.equal(out[0], expected)
        compiled[name] += compiled_so_far(name, model) - before
        sizes = cache_sizes(model)
        if sizes[0] > kv[name]:
            kv[name], positions[name], mask[name] = sizes

    for name in RUNNERS:
        call(name, timed=False)
    for _ in range(2 if quick or new > NEW_TOKENS[0] else 5):
        for name in RUNNERS:
            call(name, timed=True)
    return Result({n: statistics.median(s) for n, s in per_call.items()}, compiled, kv, positions, mask, same)


def report(results: dict[tuple[int, int], Result]) -> Table:
    table = Table(
        name="generate",
        title="litgpt's generate: time per token, compilations, cache bytes",
        setup=(
            f"litgpt's own `generate` (greedy) of the demo model (4 layers, n_embd 512, 8 heads, float32), a "
            f"{PROMPT}-token prompt, batch 1. Per token: median wall time of a `generate` call over its new tokens "
            "(prefill included), the runners taking turns call by call after a first call each. Compiled: thunder "
            "cache entries (with the growth copy's) or Dynamo graphs, after every call of the row. KV: the largest "
            "k and v buffers of all layers seen after a call; mask: litgpt's attention mask beside them."
        ),
        columns=["max_seq_length", "new tokens", *(f"{r} ms/token" for r in RUNNERS), "growing / eager",
                 "growing, thunder.compile / eager", "growing + tc ex / eager", *(f"{r} compiled" for r in RUNNERS), "KV MiB (litgpt / growing)",
                 "mask MiB (litgpt / growing)", "tokens as eager's"],  # fmt: skip
    )
    for (length, new), r in results.items():
        table.rows.append(
            [str(length), str(new), *(ms(r.per_token[n]) for n in RUNNERS), ratio(r.per_token[GROWING], r.per_token[EAGER]),
             ratio(r.per_token[GROWING_PLUGIN], r.per_token[EAGER]), ratio(r.per_token[GROWING_TC], r.per_token[EAGER]), *(str(r.compiled[n]) for n in RUNNERS),
             f"{mib(r.kv_bytes[EAGER])} / {mib(r.kv_bytes[GROWING])}", f"{mib(r.mask_bytes[EAGER])} / {mib(r.mask_bytes[GROWING])}",
             "all" if all(r.same_tokens.values()) else "not: " + ", ".join(n for n, s in r.same_tokens.items() if not s)]
        )  # fmt: skip
    table.targets = _targets(results)

    def plot(path: Path, machine: str) -> None:
        panels = {f"{PROMPT}-token prompt, {new} new tokens": {L: r.per_token for (L, n), r in results.items() if n == new}
                  for new in sorted({n for _, n in results})}  # fmt: skip
        plot_per_length(path, machine, "litgpt generate (demo model), ms per new token", panels, RUNNERS,
                        "ms per new token (median)", log_time=True)  # fmt: skip

    table.plot = plot
    return table


def _targets(results: dict[tuple[int, int], Result]) -> list[Target]:
    targets = []
    for (length, new), r in results.items():
        if new != NEW_TOKENS[0]:
            continue
        growing, eager = r.per_token[GROWING], r.per_token[EAGER]
        targets.append(Target(f"{PROMPT} + {new} tokens at {length}: {GROWING} at most 1.0x eager per token",
                              ratio(growing, eager), growing <= eager))  # fmt: skip
        positions = r.positions[GROWING]
        targets.append(Target(f"{PROMPT} + {new} tokens at {length}: the growing cache holds at most 1024 positions",
                              f"{positions} positions ({mib(r.kv_bytes[GROWING])} MiB)", positions <= 1024))  # fmt: skip
    same = [n for r in results.values() for n, s in r.same_tokens.items() if not s]
    targets.append(Target("every runner's tokens equal eager's", "all" if not same else "not: " + ", ".join(same), not same))
    return targets
