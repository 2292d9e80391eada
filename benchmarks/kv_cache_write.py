"""KV-cache write time against cache length: eager, stock thunder.jit, thunder_ext.jit, side by side.

One token is written with ``index_copy_`` into K and V caches of shape (1, 8, L, 128), float32.
Run: ``python benchmarks/kv_cache_write.py`` (writes docs/benchmarks/kv_cache_write.{md,png}).
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import thunder
import torch

import thunder_ext
from thunder_ext.timing import median_seconds

LENGTHS = (256, 1024, 4096, 16384)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks"


def write_kv(k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, new_k: torch.Tensor, new_v: torch.Tensor):
    k.index_copy_(2, pos, new_k)
    v.index_copy_(2, pos, new_v)


def measure(length: int, repeat: int) -> dict[str, float]:
    k, v = torch.zeros(1, 8, length, 128), torch.zeros(1, 8, length, 128)
    pos = torch.tensor([length // 2])
    new_k, new_v = torch.randn(1, 8, 1, 128), torch.randn(1, 8, 1, 128)
    runners = {"eager": write_kv, "thunder.jit": thunder.jit(write_kv), "thunder_ext.jit": thunder_ext.jit(write_kv)}
    # Interleave repeats so that noise on this shared machine hits every runner alike.
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(5):
        for name, fn in runners.items():
            times[name].append(median_seconds(lambda: fn(k, v, pos, new_k, new_v), repeat=repeat))
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    results = {length: measure(length, args.repeat) for length in LENGTHS}
    names = list(next(iter(results.values())))
    machine = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    versions = f"torch {torch.__version__}, lightning-thunder {thunder.__version__}, Python {platform.python_version()}"
    lines = [
        "# KV-cache write: time per call (µs, median)",
        "",
        f"Machine: {machine}; {versions}. Cache (1, 8, L, 128) float32, one token into K and V.",
        "",
        "| L | " + " | ".join(names) + " | thunder_ext / eager | thunder_ext at L / at 256 |",
        "| --- | " + " | ".join("---" for _ in names) + " | --- | --- |",
    ]
    base = results[LENGTHS[0]]["thunder_ext.jit"]
    for length, r in results.items():
        cells = " | ".join(f"{r[n] * 1e6:,.1f}" for n in names)
        ratio = r["thunder_ext.jit"] / r["eager"]
        lines.append(f"| {length} | {cells} | {ratio:.2f}x | {r['thunder_ext.jit'] / base:.2f}x |")
    DOCS.mkdir(parents=True, exist_ok=True)
    (DOCS / "kv_cache_write.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (pip install '.[bench]')")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for n in names:
        ax.plot(LENGTHS, [results[L][n] * 1e6 for L in LENGTHS], marker="o", label=n)
    ax.set(xscale="log", yscale="log", xlabel="cache length L", ylabel="µs per write (K and V)")
    ax.set_title("KV-cache write (1, 8, L, 128) f32", fontsize=10)
    fig.text(0.01, 0.01, f"{machine}; {versions}", fontsize=6)
    ax.legend()
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(DOCS / "kv_cache_write.png", dpi=120)


if __name__ == "__main__":
    main()
