"""HF transformers' ``generate``: a 16-token prompt, then 512 new tokens, greedy, batch 1, a random Llama of the
demo model's size, each runner as its users run it: eager with HF's default ``DynamicCache`` (its ``cat`` copies
the whole cache each step) and with ``StaticCache``; the extension through ``thunderfx``, its recipe and the
``ThunderCompiler`` backend, with the cache each gets by default and with ``StaticCache``; and
``torch.compile(model.forward, fullgraph=True)`` with ``StaticCache``, HF's own recipe for compiled generation
(without ``mode="reduce-overhead"``, which is CUDA graphs).

Per-token time is a ``generate`` call's wall time over its new tokens (the prefill included), the runners taking
turns call by call, after a first call of each that compiles.
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass, field

import thunder
import torch

import thunder_ext
from thunder_ext.benchmarks.measure import configure_inductor, gc_paused, seconds, status
from thunder_ext.benchmarks.report import Table, Target, mib, ms, ratio

PROMPT = 16
NEW_TOKENS = 512
EAGER_DYNAMIC, EAGER_STATIC = "eager, DynamicCache", "eager, StaticCache"
FX_DEFAULT, FX_STATIC = "thunderfx, default (growing)", "thunderfx, StaticCache"
RECIPE_DEFAULT, RECIPE_STATIC = "HFTransformersRecipe + plugin, default (growing)", "HFTransformersRecipe + plugin, StaticCache"
BACKEND_GROWING = "ThunderCompiler, GrowingStaticCache passed"
INDUCTOR_STATIC = "torch.compile(fullgraph=True), StaticCache"
RUNNERS = (EAGER_DYNAMIC, EAGER_STATIC, FX_DEFAULT, FX_STATIC, RECIPE_DEFAULT, RECIPE_STATIC, BACKEND_GROWING,
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
        owner = getattr(self.model, "_model", self.model)  # the recipe's ThunderModule reads the model's
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


def measure(new: int, device: torch.device, quick: bool) -> Result:
    if device.type != "cpu":
        raise ValueError("the hf_generate case runs on the CPU")
    torch._dynamo.reset()
    base = small_llama()
    runners = {name: runner(name, base) for name in RUNNERS}
    ids = prompt()
    expected = generate(runners[EAGER_DYNAMIC], ids, new).sequences
    per_call: dict[str, list[tuple[float, float]]] = {name: [] for name in RUNNERS}
    compiled, same = dict.fromkeys(RUNNERS, 0), dict.fromkeys(RUNNERS, True)
    kv, kind, copies = dict.fromkeys(RUNNERS, 0), dict.fromkeys(RUNNERS, ""), dict.fromkeys(RUNNERS, 0)

    def call(name: str, timed: bool) -> None:
        status(f"{'timing' if timed else 'compiling and warming up'} {name}, {new} tokens")
        r = runners[name]
        before, r.preparing[0] = compiled_so_far(name, r), 0.0
        with contextlib.nullcontext() if timed else gc_paused():
            out = []
            took = seconds(lambda: out.append(generate(r, ids, new)), device)
        if timed:
            per_call[name].append((took / new, r.preparing[0] / new))
        same[name] &= torch.equal(out[0].sequences, expected)
        compiled[name] += compiled_so_far(name, r) - before
        kv[name], kind[name] = max(kv[name], cache_bytes(out[0].past_key_values)[0]), cache_bytes(out[0].past_key_values)[1]
        if r.compiled is not None:
            copies[name] = sum(d.how == "copy" for d in thunder_ext.inplace_decisions(r.compiled))

    for name in RUNNERS:
        call(name, timed=False)
    for _ in range(2 if quick else 3):
        for name in RUNNERS:
            call(name, timed=True)
    medians = {n: sorted(calls)[len(calls) // 2] for n, calls in per_call.items()}  # the median call, both parts
    return Result({n: m[0] for n, m in medians.items()}, {n: m[1] for n, m in medians.items()}, compiled, kv, kind,
                  same, copies)  # fmt: skip


def report(results: dict[int, Result]) -> Table:
    table = Table(
        name="hf_generate",
        title="HF transformers' generate: time per token, compilations, cache bytes",
        setup=(
            f"HF's `generate` (greedy) of a random Llama (4 layers, hidden 512, 8 heads, 4 key-value heads, float32), "
            f"a {PROMPT}-token prompt with its attention mask, batch 1. Per token: median wall time of a `generate` call "
            "over its new tokens (prefill included), the runners taking turns call by call after a first call each. "
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
