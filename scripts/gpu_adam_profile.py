"""Where an Adam step's time goes on a CUDA GPU. The last GPU run measured, for 32 parameters of 65,536 elements
(docs/gpu_results.md), eager 1.92 ms a step, thunder.jit 4.70, thunder_ext.jit 4.25: this says why. Per runner
(eager, thunder.jit, thunder_ext.jit, thunder_ext.jit + torch.compile ex), as one JSON line each:

- ``step_ms``: the median wall time of a step, synchronized;
- ``computation_host_ms``: of that, the median host time of thunder's computation function (thunder's compile
  statistics); the rest of a thunder step is its cache lookup, which runs the prologue, and the call around it;
- ``kernels`` and ``kernel_ms``: the CUDA kernels one step launches and their summed device time (torch.profiler);
- ``top_host_ops``: the host functions one step spends most time in.

    python scripts/gpu_adam_profile.py [--params 32] [--numel 65536] [--device cpu]   (scripts/gpu_check.sh runs it)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import thunder
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from thunder_ext.benchmarks.adam import adam_step
from thunder_ext.benchmarks.measure import THUNDER_EXT_TC, compiled
from thunder_ext.thunder026.adapt import adapt_thunder

RUNNERS = ("eager", "thunder.jit", "thunder_ext.jit", THUNDER_EXT_TC)


def one_runner(runner: str, n_params: int, numel: int, device: str, repeat: int = 50) -> dict:
    torch.manual_seed(0)
    params, grads = ([torch.randn(numel, device=device) for _ in range(n_params)] for _ in range(2))
    exp_avgs, exp_avg_sqs = ([torch.zeros(numel, device=device) for _ in range(n_params)] for _ in range(2))
    synchronize = torch.cuda.synchronize if device == "cuda" else lambda: None
    fn = compiled(runner, adam_step)
    args = (params, grads, exp_avgs, exp_avg_sqs)
    start = time.perf_counter()
    fn(*args)
    synchronize()
    first_s = time.perf_counter() - start
    for _ in range(5):
        fn(*args)
    steps, hosts = [], []
    for _ in range(repeat):
        synchronize()
        start = time.perf_counter()
        fn(*args)
        synchronize()
        steps.append(time.perf_counter() - start)
        if runner != "eager":
            cs = thunder.compile_stats(fn)
            hosts.append((cs.last_trace_host_execution_stop - cs.last_trace_host_execution_start) / 1e9)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        fn(*args)
        synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    host_ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
    return {
        "runner": runner,
        "params": n_params,
        "numel": numel,
        "first_call_s": round(first_s, 2),
        "step_ms": round(statistics.median(steps) * 1e3, 3),
        "computation_host_ms": round(statistics.median(hosts) * 1e3, 3) if hosts else None,
        "kernels": len(kernels),
        "kernel_ms": round(sum(e.device_time_total for e in kernels) / 1e3, 3),
        "top_host_ops": [(e.key, e.count, round(e.self_cpu_time_total / 1e3, 3)) for e in host_ops],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=int, default=32)
    parser.add_argument("--numel", type=int, default=65536)
    parser.add_argument("--device", default="cuda", help="cpu for a dry run")
    args = parser.parse_args()
    adapt_thunder()  # stock thunder.jit's nvFuser regions need it too (thunder026/adapt.py)
    for runner in RUNNERS:
        try:
            print("ADAM_PROFILE " + json.dumps(one_runner(runner, args.params, args.numel, args.device)), flush=True)
        except Exception as e:  # noqa: BLE001 (a runner that fails is reported, the others still run)
            print(
                "ADAM_PROFILE " + json.dumps({"runner": runner, "error": f"{type(e).__name__}: {e}"[:500]}), flush=True
            )


if __name__ == "__main__":
    main()
