"""litgpt's own ``generate`` on a CUDA GPU, bf16: time per token and each runner's first call, for one model and
``max_seq_length`` per process (``scripts/gpu_check.sh`` runs several side by side under one time limit).

Runners, in the order they compile: eager (litgpt's ``generate`` tells it the positions written, its
``input_pos_maxp1``), ``thunder_ext.jit`` with the growing cache under thunder's default executors (nvFuser
among them where it loads) and without nvFuser (the PyTorch executor runs every op), stock ``thunder.jit``,
``torch.compile(dynamic=True)``, and ``thunder_ext.jit``
with thunder's CUDA-graph transform over the growing cache. A runner whose compilation is not expected to end
before ``--time-by`` (``COMPILE_GUESS``, seconds on the GPU machine's CPU) is left out and recorded so; so is
one that fails, with its error. Then, holding ``timing_turn`` (one process timing at a time), the compiled
runners take turns call by call. Each result is appended to ``--out`` as one JSON line as soon as it is known,
so that a run stopped at its limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import thunder
import torch

import thunder_ext
from thunder_ext.benchmarks.generate import compiled_so_far, generate, prompt
from thunder_ext.benchmarks.measure import configure_inductor, gc_paused, machine, seconds
from thunder_ext.tools.demo_model import small_model
from thunder_ext.tools.timing import timing_turn

EAGER, GROWING, STOCK, DYNAMIC, GRAPHS = "eager", "growing", "stock", "dynamic", "graphs"
GROWING_TORCH = "growing-torch"
RUNNERS = {  # what --runners names: the label results carry
    EAGER: "eager",
    GROWING: "thunder_ext.jit, growing cache",
    GROWING_TORCH: "thunder_ext.jit, growing cache, without nvFuser",
    STOCK: "thunder.jit",
    DYNAMIC: "torch.compile(dynamic=True)",
    GRAPHS: "thunder_ext.jit, growing cache, CUDA graphs",
}
# seconds a runner's first generate call may take on the GPU machine, guessed from the CPU machine's
# compile times (docs/benchmarks/compile_time.md): a runner starts compiling only if this fits before --time-by
COMPILE_GUESS = {
    "demo": {EAGER: 2, GROWING: 25, GROWING_TORCH: 25, STOCK: 45, DYNAMIC: 60, GRAPHS: 30},
    "SmolLM2-135M": {EAGER: 3, GROWING: 90, GROWING_TORCH: 90, STOCK: 250, DYNAMIC: 200, GRAPHS: 100},
}


def without_nvfuser() -> list:
    """thunder's default executors less nvFuser: the PyTorch executor runs what nvFuser would fuse."""
    return [e for e in thunder.get_default_executors() if e.name != "nvfuser"]


def base_model(name: str, max_seq_length: int, device: torch.device) -> torch.nn.Module:
    """The demo model or SmolLM2-135M's litgpt config (30 layers, random weights), bf16 on ``device``."""
    if name == "demo":
        model = small_model(max_seq_length)
    elif name == "SmolLM2-135M":
        from litgpt import GPT, Config

        torch.manual_seed(0)
        model = GPT(Config.from_name(name)).eval()
        model.max_seq_length = max_seq_length
    else:
        raise ValueError(f"unknown model {name!r}; expected 'demo' or 'SmolLM2-135M'")
    return model.to(device=device, dtype=torch.bfloat16)


def runner(name: str, base: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``base`` as ``name`` runs it, with its own cache: litgpt's, or ``thunder_ext.set_kv_cache``'s."""
    model = copy.deepcopy(base)
    if name in (GROWING, GROWING_TORCH, GRAPHS):
        if name == GRAPHS:
            from thunder.transforms.cudagraph import CUDAGraphTransform

            # without autograd: thunder 0.2.6 differentiates a model whose parameters require grad even under
            # inference_mode, and its CUDAGraphTransform then refuses a second forward compiled without a
            # backward between ("called on augmented forward twice"): generate compiles prefill, then decode
            compiled = thunder_ext.jit(model, transforms=[CUDAGraphTransform()], disable_torch_autograd=True)
        elif name == GROWING_TORCH:
            compiled = thunder_ext.jit(model, executors=without_nvfuser())
        else:
            compiled = thunder_ext.jit(model)
        thunder_ext.set_kv_cache(compiled, batch_size=1, device=device, dtype=torch.bfloat16)
        return compiled
    if name == EAGER:
        compiled = model
    elif name == STOCK:
        compiled = thunder.jit(model)
    elif name == DYNAMIC:
        configure_inductor()
        compiled = torch.compile(model, dynamic=True)
    else:
        raise ValueError(f"unknown runner {name!r}; expected one of {', '.join(RUNNERS)}")
    model.set_kv_cache(batch_size=1, device=device, dtype=torch.bfloat16)
    return compiled


def leading_agreement(tokens: torch.Tensor, expected: torch.Tensor) -> int:
    """How many of ``tokens`` equal ``expected``'s before the first that differs (bf16 rounding may tip an argmax)."""
    differ = (tokens != expected).nonzero()
    return int(differ[0, 0]) if len(differ) else len(tokens)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m thunder_ext.benchmarks.cuda_generate", description=__doc__)
    parser.add_argument("--model", default="demo", choices=sorted(COMPILE_GUESS))
    parser.add_argument("--length", type=int, default=2048, help="max_seq_length")
    choices = ", ".join(f"{key} ({label})" for key, label in RUNNERS.items())
    parser.add_argument("--runners", default=",".join(RUNNERS), help=f"comma-separated, from: {choices}")
    parser.add_argument("--new", type=int, default=128, help="new tokens per generate call (the prompt has 16)")
    parser.add_argument("--calls", type=int, default=3, help="timed generate calls per runner")
    parser.add_argument("--time-by", type=float, default=float("inf"), help="epoch seconds: compile only what ends by then")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True, help="a file the JSON lines are appended to")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.runners.split(",") if n.strip()]
    if unknown := [n for n in names if n not in RUNNERS]:
        parser.error(f"unknown runner(s) {', '.join(unknown)}; choose from {', '.join(RUNNERS)}")
    device = torch.device(args.device)
    config = {"model": args.model, "max_seq_length": args.length, "new_tokens": args.new, "machine": machine(device)}

    def record(runner_name: str, **fields) -> None:
        with args.out.open("a") as out:
            out.write(json.dumps({**config, "runner": RUNNERS[runner_name], **fields}) + "\n")

    base = base_model(args.model, args.length, device)
    tokens = prompt().to(device)
    expected: torch.Tensor | None = None
    calls: dict[str, Callable[[], torch.Tensor]] = {}
    for name in names:
        if time.time() + COMPILE_GUESS[args.model][name] > args.time_by:
            record(name, skipped=f"its first call (guessed {COMPILE_GUESS[args.model][name]} s) would end after the time limit")
            continue
        try:
            model = runner(name, base, device)
            out: list[torch.Tensor] = []
            with gc_paused():
                first = seconds(lambda: out.append(generate(model, tokens, args.new)), device)
            expected = out[0] if expected is None else expected  # eager's, when eager runs first
            record(name, phase="first call", first_call_s=round(first, 2), compiled=compiled_so_far(RUNNERS[name], model),
                   same_tokens_as_first_runner=bool(torch.equal(out[0], expected)),
                   tokens_as_first_runners_before_the_first_other=leading_agreement(out[0], expected))  # fmt: skip
            calls[name] = lambda model=model: generate(model, tokens, args.new)
        except Exception as error:  # recorded and left out: the others are still measured
            record(name, error=f"{type(error).__name__}: {error}"[:2000], traceback=traceback.format_exc()[-4000:])
    per_token: dict[str, list[float]] = {name: [] for name in calls}
    same = dict.fromkeys(calls, True)
    with timing_turn():
        for _ in range(args.calls):
            for name, call in calls.items():
                out = []
                per_token[name].append(seconds(lambda: out.append(call()), device) / args.new)
                same[name] &= bool(torch.equal(out[0], expected))
    for name, samples in per_token.items():
        record(name, phase="timed", per_token_ms=round(1e3 * statistics.median(samples), 3),
               samples_ms=[round(1e3 * s, 3) for s in samples], same_tokens_as_first_runner=same[name])  # fmt: skip


if __name__ == "__main__":
    main()
