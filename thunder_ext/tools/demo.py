"""Demo: greedy decoding with a small litgpt model under thunder_ext.jit, its KV cache growing with what it holds.

``thunder_ext.set_kv_cache`` gives the jitted model a cache that holds a bucket of positions, not
``max_seq_length``; each bucket compiles once, and the extension logs what it compiles, with the seconds.
Prints the in-place cache writes of the execution trace, how the checker decided each, and the time per
decoded token next to eager PyTorch and stock ``thunder.jit``, both with litgpt's cache, as litgpt's
``generate`` runs them (eager attends to the positions written, ``input_pos_maxp1``; a thunder module to its
whole cache). The runners take turns in blocks of tokens, so that a load on the machine falls on all of them
alike, and each median comes with its spread. Run: ``thunder-ext demo`` or ``python -m thunder_ext.tools.demo``
(``--help`` for the options).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import thunder
import torch

import thunder_ext
from thunder_ext.compile_cache import LoadedTrace
from thunder_ext.thunder026.compiled import compiled_module
from thunder_ext.tools.demo_model import small_model
from thunder_ext.tools.extras import require
from thunder_ext.tools.timing import interleaved_samples
from thunder_ext.transforms.aliasing import is_copy_to_out

CPU = torch.device("cpu")


class Decoder:
    """Greedy decoding of one runner, one token per ``step()``, under ``torch.inference_mode()``, as litgpt's
    ``generate`` decodes: an eager model is told how many positions are written (``input_pos_maxp1``), a thunder
    one is not. The cache is litgpt's, or, with ``growing``, ``thunder_ext.set_kv_cache``'s."""

    def __init__(self, model, prompt: torch.Tensor, *, growing: bool) -> None:
        self.model, self.position, self.tokens = model, prompt.shape[1], []
        self.maxp1 = thunder.compile_data(model) is None
        if growing:
            thunder_ext.set_kv_cache(model, batch_size=1)
        else:
            model.set_kv_cache(batch_size=1)
        with torch.inference_mode():
            self.logits = model(prompt, torch.arange(self.position), self.position if self.maxp1 else None)

    def step(self) -> None:
        token = self.logits[:, -1].argmax(-1, keepdim=True)
        self.tokens.append(int(token))
        with torch.inference_mode():
            maxp1 = self.position + 1 if self.maxp1 else None
            self.logits = self.model(token, torch.tensor([self.position]), maxp1)
        self.position += 1


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, median, q3


def summary(samples: dict[str, list[float]]) -> list[str]:
    """One line per runner: the median ms per token with its spread (quartiles), then its ratio to each runner
    before it, with the ratio's spread (the lowest and highest ratio the two spreads allow). Where that
    spread includes 1, the two spreads overlap: the ratio is within the noise, and the line says so."""
    stats = {name: quartiles(s) for name, s in samples.items()}
    lines = []
    for i, (name, (q1, median, q3)) in enumerate(stats.items()):
        line = f"{name:>16}: {median * 1e3:8.2f} ms/token (quartiles {q1 * 1e3:.2f}-{q3 * 1e3:.2f})"
        for other, (o1, o_median, o3) in list(stats.items())[:i]:
            low, high = q1 / o3, q3 / o1
            noisy = ", spreads overlap: too noisy to conclude" if low <= 1 <= high else ""
            line += f"; {median / o_median:.2f}x {other} ({low:.2f}-{high:.2f}{noisy})"
        lines.append(line + (" -- more --tokens, or a quieter machine" if "too noisy" in line else ""))
    return lines


def timed(what: str, estimate: str, fn: Callable[[], object]) -> object:
    """``fn()``, with a status line before (what, and how long it should take) and the time it took after; the
    extension's log of what it compiles comes between them."""
    print(f"{what} ({estimate}) ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    result = fn()
    print(f"{what}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return result


def main(argv: Sequence[str] | None = None, prog: str = "python -m thunder_ext.tools.demo") -> None:
    description = (
        "Decode with a small litgpt model (4 layers) under eager and thunder.jit with litgpt's KV cache, and "
        "thunder_ext.jit with a cache that grows with what it holds (thunder_ext.set_kv_cache): print what the "
        "extension compiles, the in-place KV-cache writes of the execution trace, how each was decided, and the "
        "time per token with its spread. About 2 minutes on a 2-core CPU, most of it thunder compiling."
    )
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--max-seq-length", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=12, help="tokens timed per runner (default: 12)")
    # as the benchmarks do: a 2-thread OpenMP pool costs milliseconds per op on small VMs (docs/benchmarks.md)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: 1)")
    args = parser.parse_args(argv)
    require("thunder-ext demo")
    torch.set_num_threads(args.threads)

    base = small_model(args.max_seq_length)
    prompt = torch.randint(0, 1024, (1, 8), generator=torch.Generator().manual_seed(0))
    models = {
        "eager": copy.deepcopy(base),
        "thunder.jit": thunder.jit(copy.deepcopy(base)),
        "thunder_ext.jit": thunder_ext.jit(copy.deepcopy(base)),
    }
    decoders = {}
    for name, model in models.items():
        # the estimates: a 2-core CPU, one thread
        compiling = name != "eager"
        cached = " (a second where the compile cache, off by default, holds it)" if name == "thunder_ext.jit" else ""
        estimate = "about 15-30 s: thunder compiles the prefill" + cached if compiling else "a second"
        first = lambda m=model, g=name == "thunder_ext.jit": Decoder(m, prompt, growing=g)  # noqa: E731
        decoders[name] = timed(f"{name}: prefill and first token", estimate, first)
        estimate = "about 15-25 s: thunder compiles the decode step" + cached if compiling else "a second"
        timed(f"{name}: first decode step", estimate, decoders[name].step)
    calls = {name: d.step for name, d in decoders.items()}
    samples = timed(f"timing {args.tokens} tokens per runner, in turns", "seconds",
                    lambda: interleaved_samples(calls, CPU, warmup=0, repeat=args.tokens, rounds=3))

    ext = models["thunder_ext.jit"]
    print("== KV-cache writes in the decode step's execution trace (thunder.last_traces(model)[-1]) ==")
    trace = thunder.last_traces(ext)[-1]
    if isinstance(trace, LoadedTrace):
        print(f"(loaded from the compile cache, which keeps no bound symbols: {trace.path})")
    else:
        for bsym in trace.bound_symbols:
            # a write, or an op fused with the write it feeds (buffer reuse's ops are neither)
            if is_copy_to_out(bsym) or any(is_copy_to_out(s) for s in bsym.subsymbols):
                print(str(bsym).splitlines()[0].strip())
    print("\n== How the aliasing checker ran each write (thunder_ext.inplace_decisions(model)) ==")
    for decision in thunder_ext.inplace_decisions(ext):
        print(decision)

    held = compiled_module(ext).transformer.h[0].attn.kv_cache.k.shape[2]
    print(f"\n== KV cache: thunder_ext.set_kv_cache's holds {held} positions after {decoders['thunder_ext.jit'].position}; "
          f"litgpt's holds max_seq_length, {args.max_seq_length}, from the first token ==")
    print(f"\n== Decode, 4 layers, n_embd 512, max_seq_length {args.max_seq_length}, {args.tokens} tokens timed, CPU, {args.threads} thread(s) ==")
    print("\n".join(summary(samples)))
    eager_tokens = decoders["eager"].tokens
    for name, d in decoders.items():
        print(f"{name:>16}: {'same tokens as eager' if d.tokens == eager_tokens else 'TOKENS DIFFER FROM EAGER'}")
    if decoders["thunder_ext.jit"].tokens != eager_tokens:
        raise SystemExit("thunder_ext.jit decoded different tokens than eager")


if __name__ == "__main__":
    main()
