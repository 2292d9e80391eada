"""KV-cache write: ``index_copy_`` of one token into K and V caches of shape (1, 8, L, 128), float32."""

from __future__ import annotations

from pathlib import Path

import torch

from thunder_ext.benchmarks.measure import RUNNERS, Allocations, allocations, compiled, interleaved_medians
from thunder_ext.benchmarks.report import Table, Target, figure, ratio, save, torch_compile_executor_parity, us

Result = tuple[dict[str, float], dict[str, Allocations]]


def write_kv(k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, new_k: torch.Tensor, new_v: torch.Tensor) -> None:
    k.index_copy_(2, pos, new_k)
    v.index_copy_(2, pos, new_v)


def configs(quick: bool) -> list[int]:
    return [256, 4096] if quick else [256, 1024, 4096, 16384]


def measure(length: int, device: torch.device, quick: bool) -> Result:
    k, v = (torch.zeros(1, 8, length, 128, device=device) for _ in range(2))
    new_k, new_v = (torch.randn(1, 8, 1, 128, device=device) for _ in range(2))
    pos = torch.tensor([length // 2], device=device)
    calls = {}
    for runner in RUNNERS:
        fn = compiled(runner, write_kv)
        calls[runner] = lambda fn=fn: fn(k, v, pos, new_k, new_v)
    times = interleaved_medians(calls, device, warmup=5, repeat=20 if quick else 100)
    return times, {runner: allocations(call, device) for runner, call in calls.items()}


def report(results: dict[int, Result]) -> Table:
    lengths = list(results)
    update_bytes = 2 * 8 * 128 * 4  # one token of K and V
    table = Table(
        name="kv_cache_write",
        title="KV-cache write: time and bytes allocated per call",
        setup=(
            "`k.index_copy_(2, pos, new_k); v.index_copy_(2, pos, new_v)`, caches (1, 8, L, 128) float32, one "
            f"token ({update_bytes:,} bytes of update, passed in). Median µs per call, runners interleaved in "
            "blocks; bytes: all tensor memory the call allocates."
        ),
        columns=["L", *(f"{r} µs" for r in RUNNERS), "thunder_ext / eager", "thunder_ext at L / at 256",
                 *(f"{r} bytes" for r in RUNNERS)],  # fmt: skip
    )
    base = results[lengths[0]][0]["thunder_ext.jit"]
    for length, (times, allocs) in results.items():
        ext = times["thunder_ext.jit"]
        table.rows.append(
            [str(length), *(us(times[r]) for r in RUNNERS), ratio(ext, times["eager"]), ratio(ext, base),
             *(f"{allocs[r].total:,}" for r in RUNNERS)]  # fmt: skip
        )
    longest = lengths[-1]
    flat = results[longest][0]["thunder_ext.jit"] / base
    extra = max(a["thunder_ext.jit"].total for _, a in results.values())
    table.targets = [
        Target(f"thunder_ext time at L={longest} within 1.2x of L={lengths[0]}", f"{flat:.2f}x", flat <= 1.2),
        Target("thunder_ext: zero bytes allocated per write beyond the update", f"{extra:,} bytes at most", extra == 0),
        *(torch_compile_executor_parity(f"L={length}", times) for length, (times, _) in results.items()),
    ]

    def plot(path: Path, machine: str) -> None:
        fig, (time_ax, bytes_ax) = figure("KV-cache write, (1, 8, L, 128) float32, one token", machine, ncols=2)
        for r in RUNNERS:
            time_ax.plot(lengths, [results[L][0][r] * 1e6 for L in lengths], marker="o", label=r)
            bytes_ax.plot(lengths, [max(results[L][1][r].total, 1) for L in lengths], marker="o", label=r)
        time_ax.set(xscale="log", yscale="log", xlabel="cache length L", ylabel="µs per call (median)")
        bytes_ax.set(xscale="log", yscale="log", xlabel="cache length L", ylabel="bytes allocated per call (0 shown as 1)")
        time_ax.legend(fontsize=8)
        save(fig, path)

    table.plot = plot
    return table
