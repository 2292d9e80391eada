"""Where the first prefill of SmolLM2-135M's config (30 layers) spends its time under ``thunder_ext.jit`` with the
growing cache, on a CUDA GPU with thunder's default executors (nvFuser among them). On the GPU machine that first
call took 127-139 s, against about 30 s for the whole first token on the CPU machine, of which 8 s is tracing
(docs/gpu.md): this says where the rest goes. Prints, for one call: its seconds, then cProfile's functions by
cumulative and by own time.

    python scripts/gpu_compile_profile.py [--executors defaults|no-nvfuser] [--top 45]   (scripts/gpu_check.sh runs it)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import thunder
import torch

import thunder_ext
from thunder_ext.benchmarks.cuda_generate import base_model, without_nvfuser


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--executors", choices=("defaults", "no-nvfuser"), default="defaults")
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    executors = thunder.get_default_executors() if args.executors == "defaults" else without_nvfuser()
    model = thunder_ext.jit(base_model("SmolLM2-135M", 2048, device), executors=executors)
    thunder_ext.set_kv_cache(model, batch_size=1, device=device, dtype=torch.bfloat16)
    idx = torch.randint(0, 1000, (1, 16), device=device)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    with torch.inference_mode():
        profiler.enable()
        model(idx, torch.arange(16, device=device))
        profiler.disable()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"first prefill, executors {[e.name for e in executors]}: {time.perf_counter() - start:.1f} s")
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(args.top)
        print(f"== by {order}\n" + text.getvalue().split("\n", 6)[-1])


if __name__ == "__main__":
    main()
