"""HF transformers' ``generate``: a 16-token prompt, then 512 new tokens, greedy, batch 1, a random Llama of the
demo model's size, each runner as its users run it: eager with HF's default ``DynamicCache`` (its ``cat`` copies
the whole cache each step) and with ``StaticCache``; the extension through ``thunderfx``, its recipe and the
``ThunderCompiler`` backend, with the cache each gets by default and with ``StaticCache``; and
``torch.compile(model.forward, fullgraph=True)`` with ``StaticCache``, HF's own recipe for compiled generation
(without ``mode="reduce-overhead"``, which is CUDA graphs).

Per-token time is a ``generate`` call's wall time over its new tokens (the prefill included), the runners taking
turns call by call, after a first call of each that compiles. Each runner lives in a process of its own
(``_serve``): Dynamo keeps compiled graphs per code object, so in one process every runner's call would first check
the guards of the graphs of every other runner that compiled the same model (2 ms a token here).
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import thunder
import torch

import thunder_ext
from thunder_ext.benchmarks.measure import configure_inductor, gc_paused, seconds, status
from thunder_ext.benchmarks.report import Table, Target, mib, ms, ratio
from thunder_ext.thunder026.compiled import compiled_module

PROMPT = 16
NEW_TOKENS = 512
EAGER_DYNAMIC, EAGER_STATIC = "eager, DynamicCache", "eager, StaticCache"
# the extension's cache and mask without a compiler: what the growing cache costs by itself
EAGER_GROWING = "eager, default (growing)"
FX_DEFAULT, FX_STATIC = "thunderfx, default (growing)", "thunderfx, StaticCache"
RECIPE_DEFAULT, RECIPE_STATIC = "HFTransformersRecipe + plugin, default (growing)", "HFTransformersRecipe + plugin, StaticCache"
BACKEND_GROWING = "ThunderCompiler, GrowingStaticCache passed"
INDUCTOR_STATIC = "torch.compile(fullgraph=True), StaticCache"
RUNNERS = (EAGER_DYNAMIC, EAGER_STATIC, EAGER_GROWING, FX_DEFAULT, FX_STATIC, RECIPE_DEFAULT, RECIPE_STATIC, BACKEND_GROWING,
           INDUCTOR_STATIC)  # fmt: skip
STATIC = {EAGER_STATIC, FX_STATIC, RECIPE_STATIC, INDUCTOR_STATIC}
THUNDER = (FX_DEFAULT, FX_STATIC, RECIPE_DEFAULT, RECIPE_STATIC, BACKEND_GROWING)


def small_llama() -> torch.nn.Module:
    """A random Llama of the demo model's size (4 layers, hidden 512, 8 heads), with grouped queries (4 key-value
    heads), float32."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                                      num_key_value_heads=4, vocab_size=1024, max_position_embeddings=4096)  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


@dataclass
class Runner:
    model: torch.nn.Module  # what generate is called on
    compiled: object  # what inplace_decisions reads (None for eager and Inductor)
    kwargs: dict
    preparing: list[float] = field(default_factory=lambda: [0.0])  # seconds in prepare_inputs_for_generation

    def __post_init__(self) -> None:
        """Time ``generate``'s own step work, its inputs and (for a static cache) its attention mask, apart from
        the forward: the model's ``prepare_inputs_for_generation``, wrapped on the instance."""
        owner = compiled_module(self.model)  # the recipe's ThunderModule reads the model's
        prepare = owner.prepare_inputs_for_generation

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return prepare(*args, **kwargs)
            finally:
                self.preparing[0] += time.perf_counter() - start

        owner.prepare_inputs_for_generation = timed


def runner(name: str, base: torch.nn.Module) -> Runner:
    model = copy.deepcopy(base)
    kwargs = {"cache_implementation": "static"} if name in STATIC else {}
    if name == EAGER_GROWING:
        from thunder_ext.integrations.hf_transformers import use_growing_cache_by_default  # transformers, as small_llama

        use_growing_cache_by_default(model)
    if name == INDUCTOR_STATIC:
        configure_inductor()
        model.forward = torch.compile(model.forward, fullgraph=True)
    if name in (FX_DEFAULT, FX_STATIC):
        model.forward = thunder_ext.thunderfx(model.forward)
        return Runner(model, model.forward, kwargs)
    if name in (RECIPE_DEFAULT, RECIPE_STATIC):
        compiled = thunder.compile(model, recipe=thunder_ext.HFTransformersRecipe(), plugins="inplace")
        return Runner(compiled, compiled, kwargs)
    if name == BACKEND_GROWING:
        backend = thunder_ext.ThunderCompiler()
        model.forward = torch.compile(model.forward, backend=backend)
        return Runner(model, backend, {"growing": True})
    return Runner(model, None, kwargs)


def prompt() -> torch.Tensor:
    return torch.randint(0, 1024, (1, PROMPT), generator=torch.Generator().manual_seed(0))


def generate(r: Runner, ids: torch.Tensor, new: int):
    kwargs = dict(r.kwargs)
    if kwargs.pop("growing", False):  # a cache of the call's length, as HF makes a static one
        kwargs["past_key_values"] = thunder_ext.GrowingStaticCache(r.model.config, ids.shape[1] + new)
    with torch.no_grad():
        return r.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                                do_sample=False, return_dict_in_generate=True, **kwargs)  # fmt: skip


def compiled_so_far(name: str, r: Runner) -> int:
    """A count that grows by one for each compilation: the recipe's thunder cache entries, Dynamo's graphs."""
    if name in (RECIPE_DEFAULT, RECIPE_STATIC):
        return thunder.cache_misses(r.model)
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def cache_bytes(cache) -> tuple[int, str]:
    """Bytes of every layer's keys and values, and the cache's type."""
    tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    return sum(t.nbytes for t in tensors), type(cache).__name__


@dataclass
class Result:
    per_token: dict[str, float]  # median seconds of a generate call over its new tokens
    preparing: dict[str, float]  # of which in prepare_inputs_for_generation (the call of the median)
    compiled: dict[str, int]  # thunder cache entries or Dynamo graphs, over every call
    kv_bytes: dict[str, int]  # the cache after a call (its largest: every cache only grows within a call)
    cache_type: dict[str, str]
    same_tokens: dict[str, bool]  # every call's tokens equal eager's with DynamicCache
    copies: dict[str, int]  # cache writes of the last call left copies (thunder runners)


def configs(quick: bool) -> list[int]:
    return [64 if quick else NEW_TOKENS]


@dataclass
class Call:
    """One ``generate`` call of a runner, as its process reports it."""

    seconds: float
    preparing: float  # of which in prepare_inputs_for_generation
    compiled: int  # compilations it caused
    tokens: list[int]
    kv_bytes: int
    cache_type: str
    copies: int  # writes of its last forward left copies


def _serve(name: str, new: int, threads: int, conn: Connection) -> None:
    """A runner in a process of its own: each message is a call to make (its ``gc_paused`` flag), answered with a
    ``Call``; None ends it. Dynamo keeps its compiled graphs per code object, and every runner compiles the same
    model's code: in one process, each call would check the guards of the other runners' graphs first."""
    torch.set_num_threads(threads)
    r = runner(name, small_llama())
    ids = prompt()
    while (paused := conn.recv()) is not None:
        before, r.preparing[0] = compiled_so_far(name, r), 0.0
        with gc_paused() if paused else contextlib.nullcontext():
            out = []
            took = seconds(lambda: out.append(generate(r, ids, new)), torch.device("cpu"))
        kv_bytes, cache_type = cache_bytes(out[0].past_key_values)
        copies = sum(d.how == "copy" for d in thunder_ext.inplace_decisions(r.compiled)) if r.compiled else 0
        conn.send(Call(took, r.preparing[0], compiled_so_far(name, r) - before, out[0].sequences[0].tolist(),
                       kv_bytes, cache_type, copies))  # fmt: skip


def measure(new: int, device: torch.device, quick: bool) -> Result:
    """Each runner in a process of its own (``_serve``), all alive at once and taking turns call by call."""
    if device.type != "cpu":
        raise ValueError("the hf_generate case runs on the CPU")
    context = multiprocessing.get_context("spawn")
    pipes, processes = {}, []
    for name in RUNNERS:
        pipes[name], theirs = context.Pipe()
        processes.append(context.Process(target=_serve, args=(name, new, torch.get_num_threads(), theirs)))
        processes[-1].start()
    calls: dict[str, list[Call]] = {name: [] for name in RUNNERS}
    try:
        for timed in (False, *[True] * (2 if quick else 3)):
            for name in RUNNERS:
                status(f"{'timing' if timed else 'compiling and warming up'} {name}, {new} tokens")
                pipes[name].send(not timed)
                calls[name].append(pipes[name].recv())
    finally:
        for name in RUNNERS:
            pipes[name].send(None)
        for process in processes:
            process.join()
    expected = calls[EAGER_DYNAMIC][0].tokens
    median = {n: sorted(c[1:], key=lambda call: call.seconds)[len(c[1:]) // 2] for n, c in calls.items()}
    return Result(
        per_token={n: m.seconds / new for n, m in median.items()},
        preparing={n: m.preparing / new for n, m in median.items()},
        compiled={n: sum(call.compiled for call in c) for n, c in calls.items()},
        kv_bytes={n: max(call.kv_bytes for call in c) for n, c in calls.items()},
        cache_type={n: c[-1].cache_type for n, c in calls.items()},
        same_tokens={n: all(call.tokens == expected for call in c) for n, c in calls.items()},
        copies={n: c[-1].copies for n, c in calls.items()},
    )


def report(results: dict[int, Result]) -> Table:
    table = Table(
        name="hf_generate",
        title="HF transformers' generate: time per token, compilations, cache bytes",
        setup=(
            f"HF's `generate` (greedy) of a random Llama (4 layers, hidden 512, 8 heads, 4 key-value heads, float32), "
            f"a {PROMPT}-token prompt with its attention mask, batch 1. Per token: median wall time of a `generate` call "
            "over its new tokens (prefill included), each runner in a process of its own (Dynamo keeps the compiled graphs of "
            "every runner of a process on the same code objects), the runners taking turns call by call after a first "
            "call each. "
            "Compiled: thunder cache entries (the recipe) or Dynamo graphs (the others), over every call. Cache: every "
            "layer's keys and values after a call. Copies: cache writes of the last call left copies. Generate's inputs "
            "and mask: the time of the median call in the model's `prepare_inputs_for_generation`, per token, which "
            "builds the 4D attention mask there for a static cache, eagerly, with `torch.vmap`."
        ),
        columns=["new tokens", "runner", "ms/token", "of which generate's inputs and mask", "/ eager DynamicCache",
                 "/ torch.compile StaticCache", "compiled", "cache", "cache MiB", "copies", "tokens as eager's"],  # fmt: skip
    )
    for new, r in results.items():
        for n in RUNNERS:
            table.rows.append(
                [str(new), n, ms(r.per_token[n]), ms(r.preparing[n]), ratio(r.per_token[n], r.per_token[EAGER_DYNAMIC]),
                 ratio(r.per_token[n], r.per_token[INDUCTOR_STATIC]), str(r.compiled[n]), r.cache_type[n],
                 mib(r.kv_bytes[n]), str(r.copies[n]) if n in THUNDER else "-", "yes" if r.same_tokens[n] else "**no**"]
            )  # fmt: skip
    table.targets = _targets(results)
    return table


def _targets(results: dict[int, Result]) -> list[Target]:
    targets = []
    for new, r in results.items():
        growing = r.per_token[FX_DEFAULT]
        for peer in (EAGER_DYNAMIC, INDUCTOR_STATIC):
            targets.append(Target(f"{PROMPT} + {new} tokens: {FX_DEFAULT} at most 1.0x {peer} per token",
                                  ratio(growing, r.per_token[peer]), growing <= r.per_token[peer]))  # fmt: skip
    same = sorted({n for r in results.values() for n, s in r.same_tokens.items() if not s})
    targets.append(Target("every runner's tokens equal eager's", "all" if not same else "not: " + ", ".join(same), not same))
    copied = sorted({n for r in results.values() for n, c in r.copies.items() if c})
    targets.append(Target("every cache write of the extension's runners in place", "all" if not copied else
                          "copies: " + ", ".join(copied), not copied))  # fmt: skip
    return targets
