"""thunder's other front doors: ``torch.compile(opt.step, backend=...)`` and ``thunder.compile(..., plugins="inplace")``.

- ``adam``: the shape of the benchmark in thunder's ``copy_to_out_`` proposal. ``torch.optim.Adam``
  (``foreach=False``, the CPU default; ``adam-foreach``: ``foreach=True``, the CUDA default) over
  ``nn.Parameter``s, gradients set once, one ``step()`` per call: eager
  ``opt.step``; ``torch.compile(opt.step)`` (Inductor); ``torch.compile(opt.step, backend=...)`` with
  thunder.dynamo's ``ThunderCompiler`` and with ``thunder_ext.ThunderCompiler``, each with thunder's default
  executors and with its torch.compile executor ahead of them. Dynamo traces the step itself (state,
  bias corrections), so every runner compiles the same graph. With ``foreach=True``, stock thunder 0.2.6's
  splitter sends every ``torch._foreach_*`` op to Inductor (no thunder subgraph); ``thunder_ext.adapt_thunder``,
  which the extension's backend runs, enters them in thunder's function map, so in this process the stock
  backend traces them too.
- ``kv_write`` and ``decode``: a module's KV-cache write (two ``index_copy_`` into buffers) and the demo
  model's decode step (``thunder_ext.tools.demo_model.small_model``, batch 1, ``inference_mode``), through
  ``thunder_ext.jit`` and through ``thunder.compile(module, recipe=..., plugins="inplace")`` with the same
  executors (thunder's defaults: ``thunder_ext.DefaultExecutorsRecipe``). The difference is the recipe's ``PrunePrologueChecks``: it drops the
  prologue's metadata checks of the module's parameters and buffers.

First call: seconds of the call that compiles, each runner in turn in this process (Dynamo's cache is
reset before each).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import thunder
import thunder.dynamo
import torch
from thunder.executors.torch_compile import torch_compile_ex

import thunder_ext
from thunder_ext.benchmarks.measure import Allocations, allocations, configure_inductor, interleaved_medians, status
from thunder_ext.benchmarks.report import Table, Target, mib, ms, ratio
from thunder_ext.tools.demo_model import small_model

Config = tuple[str, int, int]  # (case, count, size)
# seconds per call, first-call seconds, allocations, and the extension's writes: (in place, all)
Result = tuple[dict[str, float], dict[str, float], dict[str, Allocations], tuple[int, int]]

EAGER, INDUCTOR, STOCK_BACKEND, EXT_BACKEND = "eager", "torch.compile", "thunder backend", "thunder_ext backend"
STOCK_BACKEND_TC, EXT_BACKEND_TC = f"{STOCK_BACKEND} + torch.compile ex", f"{EXT_BACKEND} + torch.compile ex"
JIT, PLUGIN = "thunder_ext.jit", 'thunder.compile(plugins="inplace")'


def configs(quick: bool) -> list[Config]:
    adam = [("adam", 32, 2**16)] if quick else [("adam", 128, 2**14), ("adam", 32, 2**18)]
    adam.append(("adam-foreach", 32, 2**16 if quick else 2**18))
    return [*adam, ("kv_write", 1, 512 if quick else 2048), ("decode", 1, 256 if quick else 1024)]


def _first_call(calls: dict[str, Callable[[], object]]) -> dict[str, float]:
    first = {}
    for name, call in calls.items():
        status(f"compiling {name}")
        start = time.perf_counter()
        call()
        first[name] = time.perf_counter() - start
    return first


def _in_place(compiled: Callable) -> tuple[int, int]:
    decisions = thunder_ext.inplace_decisions(compiled)
    return sum(d.how != "copy" for d in decisions), len(decisions)


def _adam(count: int, numel: int, device: torch.device, repeat: int, foreach: bool) -> Result:
    configure_inductor()
    torch._dynamo.reset()
    torch.manual_seed(0)
    with_tc = [torch_compile_ex, *thunder.get_default_executors()]
    backends = {INDUCTOR: "inductor", STOCK_BACKEND: thunder.dynamo.ThunderCompiler(), EXT_BACKEND: thunder_ext.ThunderCompiler(),
                STOCK_BACKEND_TC: thunder.dynamo.ThunderCompiler(executors=with_tc),
                EXT_BACKEND_TC: thunder_ext.ThunderCompiler(executors=with_tc)}  # fmt: skip
    steps = {}
    for name in (EAGER, *backends):
        params = [torch.nn.Parameter(torch.randn(numel, device=device)) for _ in range(count)]
        for p in params:
            p.grad = torch.randn_like(p)
        step = torch.optim.Adam(params, lr=1e-3, foreach=foreach).step
        steps[name] = step if name == EAGER else torch.compile(step, backend=backends[name])
    first = _first_call(steps)
    seconds = interleaved_medians(steps, device, warmup=2, repeat=repeat)
    in_place = [_in_place(steps[name]) for name in (EXT_BACKEND, EXT_BACKEND_TC)]
    return seconds, first, {n: allocations(c, device) for n, c in steps.items()}, _fewest(in_place)


def _fewest(in_place: list[tuple[int, int]]) -> tuple[int, int]:
    """The writes in place of the runner with the fewest, out of the most writes any runner had."""
    return min(i for i, _ in in_place), max(n for _, n in in_place)


class KVCache(torch.nn.Module):
    def __init__(self, length: int) -> None:
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 8, length, 64))
        self.register_buffer("v", torch.zeros(1, 8, length, 64))

    def forward(self, pos: torch.Tensor, new_k: torch.Tensor, new_v: torch.Tensor) -> None:
        self.k.index_copy_(2, pos, new_k)
        self.v.index_copy_(2, pos, new_v)


def _through_jit_and_plugin(make: Callable[[], torch.nn.Module], call: Callable, device: torch.device, repeat: int) -> Result:
    modules = {JIT: make().to(device), PLUGIN: make().to(device)}
    compiled = {JIT: thunder_ext.jit(modules[JIT]),
                PLUGIN: thunder.compile(modules[PLUGIN], recipe=thunder_ext.DefaultExecutorsRecipe(), plugins="inplace")}  # fmt: skip
    calls = {name: (lambda c=c, m=modules[name]: call(c, m)) for name, c in compiled.items()}
    with torch.inference_mode():
        first = _first_call(calls)
        seconds = interleaved_medians(calls, device, warmup=2, repeat=repeat)
        allocs = {n: allocations(c, device) for n, c in calls.items()}
    return seconds, first, allocs, _fewest([_in_place(c) for c in compiled.values()])


def _kv_write(length: int, device: torch.device, repeat: int) -> Result:
    pos, new = torch.tensor([length // 2], device=device), torch.randn(1, 8, 1, 64, device=device)
    return _through_jit_and_plugin(lambda: KVCache(length), lambda c, m: c(pos, new, new), device, repeat)


def _decode(length: int, device: torch.device, repeat: int) -> Result:
    token, positions = torch.tensor([[7]], device=device), {}

    def make() -> torch.nn.Module:
        model = small_model(length)
        model.set_kv_cache(batch_size=1, device=device)
        return model

    def step(compiled: Callable, model: torch.nn.Module) -> object:
        # not an attribute of the module: thunder would check it in the prologue and recompile each step
        positions[id(model)] = position = (positions.get(id(model), -1) + 1) % length
        return compiled(token, torch.tensor([position], device=device))

    return _through_jit_and_plugin(make, step, device, repeat)


def measure(config: Config, device: torch.device, quick: bool) -> Result:
    case, count, size = config
    repeat = 5 if quick else 20
    if case.startswith("adam"):
        return _adam(count, size, device, repeat, foreach=case == "adam-foreach")
    return {"kv_write": _kv_write, "decode": _decode}[case](size, device, repeat)


def _label(config: Config) -> str:
    case, count, size = config
    return {"adam": f"Adam, {count} × {size:,}", "adam-foreach": f"Adam (foreach), {count} × {size:,}",
            "kv_write": f"KV write, {size} tokens",
            "decode": f"decode step, {size} tokens"}[case]  # fmt: skip


def report(results: dict[Config, Result]) -> Table:
    table = Table(
        name="entry_points",
        title="Entry points: the torch.compile backend on torch.optim.Adam, the thunder.compile plugin",
        setup=(
            "Median ms per call, runners interleaved in one run; first call: seconds of the call that compiles; "
            "MiB: all tensor memory one call allocates, and the largest single block. Runners: the docstring "
            "of `benchmarks/entry_points.py`."
        ),
        columns=["case", "runner", "ms", "first call s", "MiB allocated", "largest block KiB", "thunder_ext writes in place"],
    )
    for config, (seconds, first, allocs, in_place) in results.items():
        for runner in seconds:
            mine = runner in (EXT_BACKEND, EXT_BACKEND_TC, JIT, PLUGIN)
            table.rows.append([_label(config), runner, ms(seconds[runner]), f"{first[runner]:.1f}",
                               mib(allocs[runner].total), f"{allocs[runner].largest / 1024:.0f}",
                               "{} of {}".format(*in_place) if mine else ""])  # fmt: skip
    for config, (seconds, first, allocs, (in_place, writes)) in results.items():
        case, _, size = config
        label = _label(config)
        table.targets.append(Target(f"{label}: every write of thunder_ext in place", f"{in_place} of {writes}",
                                    writes > 0 and in_place == writes))  # fmt: skip
        if case.startswith("adam"):
            table.targets += [t for pair in ((EXT_BACKEND, STOCK_BACKEND), (EXT_BACKEND_TC, STOCK_BACKEND_TC))
                              for t in _adam_targets(label, size, seconds, allocs, *pair)]  # fmt: skip
        elif case == "kv_write":
            table.targets.append(Target(f"{label}: through the plugin no slower per call than through thunder_ext.jit",
                                        ratio(seconds[PLUGIN], seconds[JIT]), seconds[PLUGIN] <= seconds[JIT]))  # fmt: skip
    table.notes.append(
        "Adam (foreach): `foreach=True`. Stock thunder 0.2.6's backend in a process of its own sends the whole "
        "step to Inductor (its splitter finds no thunder entry for the `torch._foreach_*` ops), as the "
        "torch.compile row runs it; the thunder backend rows here run after `thunder_ext.adapt_thunder`, which "
        "enters the ops in thunder's function map for stock thunder too."
    )
    table.notes.append(
        "The plugin's and the jit's calls differ by the recipe's `PrunePrologueChecks`: the per-call "
        "difference in the KV-write and decode rows is what dropping the metadata checks of the module's "
        "parameters and buffers saves."
    )
    return table


def _adam_targets(label: str, numel: int, seconds: dict[str, float], allocs: dict[str, Allocations], ext: str, stock: str) -> list[Target]:
    mine, theirs, inductor = seconds[ext], seconds[stock], seconds[INDUCTOR]
    largest = allocs[ext].largest
    return [
        Target(f"{label}: {ext} no slower than {stock}", ratio(mine, theirs), mine <= theirs),
        Target(f"{label}: {ext} at most 1.2x Inductor", ratio(mine, inductor), mine <= 1.2 * inductor),
        Target(f"{label}: {ext}, no parameter-sized allocation per step", f"largest block {largest / 1024:.0f} KiB",
               largest < numel * 4),
    ]
