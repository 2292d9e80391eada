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
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from thunder_ext.tools.demo_model import N_EMBD, N_LAYER
from thunder_ext.tools.extras import check_cache_settings, fail, require
from thunder_ext_cli import PROMPT_TOKENS, ROUNDS, TOKENS, demo_parser

# torch, thunder and litgpt are imported where used, once the arguments are checked: --help and a wrong value
# answer without them
if TYPE_CHECKING:
    import torch


class Decoder:
    """Greedy decoding of one runner, one token per ``step()``, under ``torch.inference_mode()``, as litgpt's
    ``generate`` decodes: an eager model is told how many positions are written (``input_pos_maxp1``), a thunder
    one is not. The cache is litgpt's, or, with ``growing``, ``thunder_ext.set_kv_cache``'s."""

    def __init__(self, model, prompt: torch.Tensor, *, growing: bool) -> None:
        import thunder
        import torch

        import thunder_ext

        self.model, self.position, self.tokens = model, prompt.shape[1], []
        self.maxp1 = thunder.compile_data(model) is None
        if growing:
            thunder_ext.set_kv_cache(model, batch_size=1)
        else:
            model.set_kv_cache(batch_size=1)
        with torch.inference_mode():
            self.logits = model(prompt, torch.arange(self.position), self.position if self.maxp1 else None)

    def step(self) -> None:
        import torch  # a look-up in sys.modules, for every runner alike

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
    """One line per runner: the median ms per token with its spread (quartiles), then how many times faster or
    slower it is than each runner before it (the ratio of the medians), with the ratio's spread (the lowest and
    highest ratio the two spreads allow). Where that spread includes 1, the two spreads overlap: the ratio is
    within the noise, and the line says so."""
    stats = {name: quartiles(s) for name, s in samples.items()}
    lines = []
    for i, (name, (q1, median, q3)) in enumerate(stats.items()):
        line = f"{name:>16}: {median * 1e3:8.2f} ms/token (quartiles {q1 * 1e3:.2f}-{q3 * 1e3:.2f})"
        for other, (o1, o_median, o3) in list(stats.items())[:i]:
            speed, low, high = o_median / median, o1 / q3, o3 / q1  # above 1: this runner is faster
            noisy = ", spreads overlap: too noisy to conclude" if low <= 1 <= high else ""
            if speed >= 1:
                line += f"; {speed:.2f}x faster than {other} ({low:.2f}-{high:.2f}{noisy})"
            else:
                line += f"; {1 / speed:.2f}x slower than {other} ({1 / high:.2f}-{1 / low:.2f}{noisy})"
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


def positions_needed(tokens: int) -> int:
    """The positions each runner's KV cache must hold to decode the prompt, the first token, and every call that
    timing ``tokens`` tokens makes (``timed_blocks``: one untimed call per block)."""
    from thunder_ext.tools.timing import timed_blocks

    return PROMPT_TOKENS + 1 + len(timed_blocks(tokens, ROUNDS)) + tokens


def checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exits with a one-line error (``fail``) where an argument or a setting would fail only once compiled."""
    if args.tokens < 2:  # statistics.quantiles needs two samples
        fail(parser, f"--tokens {args.tokens}: at least 2, for the median and quartiles of the time per token")
    needed = positions_needed(args.tokens)
    if args.max_seq_length < needed:
        fail(parser, f"--max-seq-length {args.max_seq_length}: at least {needed} with --tokens {args.tokens} (the "
                     f"{PROMPT_TOKENS}-token prompt, the first decoded token, and {needed - PROMPT_TOKENS - 1} calls "
                     "timed in turns)")  # fmt: skip
    # litgpt's set_kv_cache gives eager, then thunder.jit, a causal mask of max_seq_length² bools (built from a
    # temporary as large) and float32 k and v caches of n_embd per layer and position
    length, memory = args.max_seq_length, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    peak = 3 * length**2 + 2 * (2 * 4 * N_EMBD * N_LAYER) * length
    if peak > memory:
        fail(parser, f"--max-seq-length {length}: litgpt's caches of eager and thunder.jit would take "
                     f"{peak / 2**30:.0f} GiB (a mask of max_seq_length² bytes each), more than this machine's "
                     f"{memory / 2**30:.0f} GiB of memory")  # fmt: skip
    if args.threads < 1:
        fail(parser, f"--threads {args.threads}: at least 1")
    check_cache_settings(parser, uses_cache=True)


def main(argv: Sequence[str] | None = None, prog: str = "python -m thunder_ext.tools.demo") -> None:
    parser = demo_parser(prog)
    args = parser.parse_args(argv)
    require("thunder-ext demo")
    checked(parser, args)
    run(args)


def run(args: argparse.Namespace) -> None:
    """The demo, its arguments checked."""
    import thunder
    import torch

    import thunder_ext
    from thunder_ext.compile_cache import LoadedTraces
    from thunder_ext.regional.programs import program_called
    from thunder_ext.thunder026.cache_entries import program_of
    from thunder_ext.thunder026.compiled import compiled_module
    from thunder_ext.tools.demo_model import small_model
    from thunder_ext.tools.timing import interleaved_samples
    from thunder_ext.transforms.op_kinds import is_copy_to_out

    torch.set_num_threads(args.threads)
    base = small_model(args.max_seq_length)
    prompt = torch.randint(0, 1024, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0))
    models = {
        "eager": copy.deepcopy(base),
        "thunder.jit": thunder.jit(copy.deepcopy(base)),
        "thunder_ext.jit": thunder_ext.jit(copy.deepcopy(base)),
    }
    decoders = {}
    for name, model in models.items():
        # the estimates: a 2-core CPU, one thread
        compiling = name != "eager"
        cached = " (a second where the compile cache holds it)" if name == "thunder_ext.jit" else ""
        estimate = "about 15-30 s: thunder compiles the prefill" + cached if compiling else "a second"
        first = lambda m=model, g=name == "thunder_ext.jit": Decoder(m, prompt, growing=g)  # noqa: E731
        decoders[name] = timed(f"{name}: prefill and first token", estimate, first)
        estimate = "about 15-25 s: thunder compiles the decode step" + cached if compiling else "a second"
        timed(f"{name}: first decode step", estimate, decoders[name].step)
    calls = {name: d.step for name, d in decoders.items()}
    samples = timed(f"timing {args.tokens} tokens per runner, in turns", "seconds",
                    lambda: interleaved_samples(calls, torch.device("cpu"), warmup=0, repeat=args.tokens,
                                                rounds=ROUNDS))

    ext = models["thunder_ext.jit"]
    print("== KV-cache writes in the decode step's execution trace (thunder.last_traces(model)[-1]) ==")
    if isinstance(thunder.last_traces(ext), LoadedTraces):
        print("(loaded from the compile cache, which keeps no traces: they are compiled afresh to be shown)")
    for bsym in thunder.last_traces(ext)[-1].bound_symbols:
        # a write, or an op fused with the write it feeds (buffer reuse's ops are neither)
        if is_copy_to_out(bsym) or any(is_copy_to_out(s) for s in bsym.subsymbols):
            print(str(bsym).splitlines()[0].strip())
        elif (program := program_called(bsym)) is not None:  # a layer's call of its block's program: its writes
            print(str(bsym).splitlines()[0].strip())
            for line in program_of(program.run, None).text.splitlines():
                if "copy_to_out" in line and not line.lstrip().startswith("#"):  # a write, not a source line
                    print("    in its program:", line.strip())
    print("\n== How the aliasing checker ran each write (thunder_ext.inplace_decisions(model)) ==")
    for decision in thunder_ext.inplace_decisions(ext):
        print(decision)

    held = compiled_module(ext).transformer.h[0].attn.kv_cache.k.shape[2]
    print(f"\n== KV cache: thunder_ext.set_kv_cache's holds {held} positions after {decoders['thunder_ext.jit'].position}; "
          f"litgpt's holds max_seq_length, {args.max_seq_length}, from the first token ==")
    print(f"\n== Decode, 4 layers, n_embd 512, max_seq_length {args.max_seq_length}, {args.tokens} tokens timed, CPU, {args.threads} thread(s) ==")
    print("\n".join(summary(samples)))
    eager_tokens = decoders["eager"].tokens
    for name, d in list(decoders.items())[1:]:
        same = d.tokens == eager_tokens
        print(f"{name:>16}: {f'same {len(d.tokens)} tokens as eager' if same else 'TOKENS DIFFER FROM EAGER'}")
    if decoders["thunder_ext.jit"].tokens != eager_tokens:
        raise SystemExit("thunder_ext.jit decoded different tokens than eager")


if __name__ == "__main__":
    main()
