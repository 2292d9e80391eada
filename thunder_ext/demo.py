"""Demo: greedy decoding with a small litgpt model and its KV cache under thunder_ext.jit.

Prints the in-place cache writes of the execution trace, how the checker decided each, and the
time per decoded token next to eager PyTorch and stock ``thunder.jit``.
Run: ``python -m thunder_ext.demo [--max-seq-length N] [--tokens N]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings
from collections.abc import Sequence

import thunder
import torch

import thunder_ext
from thunder_ext.transforms.aliasing import is_copy_to_out


def small_model(max_seq_length: int) -> torch.nn.Module:
    from litgpt.config import Config
    from litgpt.model import GPT

    config = Config(
        name="thunder-ext-demo",
        block_size=max_seq_length,
        vocab_size=1024,
        padded_vocab_size=1024,
        n_layer=4,
        n_head=8,
        n_query_groups=8,
        n_embd=512,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=1376,
    )
    torch.manual_seed(0)
    model = GPT(config).eval().requires_grad_(False)
    model.max_seq_length = max_seq_length
    return model


def decode(model, prompt: torch.Tensor, tokens: int) -> tuple[list[int], list[float]]:
    """Greedy decoding with the KV cache; returns the tokens and the seconds each decode step took."""
    model.set_kv_cache(batch_size=1)
    logits = model(prompt, torch.arange(prompt.shape[1]))
    out, seconds = [], []
    for step in range(tokens):
        token = logits[:, -1].argmax(-1, keepdim=True)
        out.append(int(token))
        start = time.perf_counter()
        logits = model(token, torch.tensor([prompt.shape[1] + step]))
        seconds.append(time.perf_counter() - start)
    return out, seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-seq-length", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=12)
    # as the benchmarks do: a 2-thread OpenMP pool costs milliseconds per op on small VMs (docs/benchmarks.md)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="transformer_engine module not found")

    base = small_model(args.max_seq_length)
    prompt = torch.randint(0, 1024, (1, 8), generator=torch.Generator().manual_seed(0))
    runners = {
        "eager": copy.deepcopy(base),
        "thunder.jit": thunder.jit(copy.deepcopy(base)),
        "thunder_ext.jit": thunder_ext.jit(copy.deepcopy(base)),
    }
    results = {name: decode(model, prompt, args.tokens) for name, model in runners.items()}

    ext = runners["thunder_ext.jit"]
    print("== KV-cache writes in the decode step's execution trace (thunder.last_traces(model)[-1]) ==")
    for bsym in thunder.last_traces(ext)[-1].bound_symbols:
        # a write, or an op fused with the write it feeds (buffer reuse's ops are neither)
        if is_copy_to_out(bsym) or any(is_copy_to_out(s) for s in bsym.subsymbols):
            print(str(bsym).splitlines()[0].strip())
    print("\n== How the aliasing checker ran each write (thunder_ext.inplace_decisions(model)) ==")
    for decision in thunder_ext.inplace_decisions(ext):
        print(decision)

    print(f"\n== Decode, 4 layers, n_embd 512, max_seq_length {args.max_seq_length}, {args.tokens} tokens, CPU, {args.threads} thread(s) ==")
    eager_ms = statistics.median(results["eager"][1]) * 1e3
    for name, (tokens, seconds) in results.items():
        ms = statistics.median(seconds) * 1e3
        same = "same tokens as eager" if tokens == results["eager"][0] else "TOKENS DIFFER FROM EAGER"
        print(f"{name:>16}: {ms:8.2f} ms/token ({ms / eager_ms:.2f}x eager), {same}")
    if results["thunder_ext.jit"][0] != results["eager"][0]:
        raise SystemExit("thunder_ext.jit decoded different tokens than eager")


if __name__ == "__main__":
    main()
