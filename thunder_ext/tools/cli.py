"""What ``thunder-ext`` runs once ``thunder_ext_cli`` (outside the package, so that --help needs no torch) has parsed
its arguments: the checks that need torch or thunder, before anything compiles, then the command."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from thunder_ext.tools.extras import check_cache_settings, fail
from thunder_ext_cli import bench_parser

# litgpt, and the command's own modules, are imported by the command that runs, once its arguments are checked


def device_error(value: str) -> str | None:
    """Why the benchmarks cannot run on ``--device value`` here, or None."""
    import torch

    try:
        device = torch.device(value)
    except RuntimeError:  # no device type torch knows
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        return f"--device {value}: the benchmarks run on cpu or cuda (cuda:N for one GPU of several)"
    if device.type == "cuda" and not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "torch finds no CUDA GPU"
        return f"--device {value}: CUDA is not available on this machine ({why}); use --device cpu"
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        return f"--device {value}: this machine has {torch.cuda.device_count()} CUDA device(s), cuda:0 and up"
    return None


def folder_error(flag: str, path: Path) -> str | None:
    """Why ``path`` cannot be a folder the command writes into (made if missing), or None."""
    if path.exists():
        ok = path.is_dir() and os.access(path, os.W_OK | os.X_OK)
        return None if ok else f"{flag} {path}: no folder you may write into"
    parent = next(p for p in path.absolute().parents if p.exists())
    if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
        return None
    return f"{flag} {path}: cannot be made, {parent} is no folder you may write into"


def check_bench(argv: Sequence[str], prog: str) -> None:
    """The benchmark suite's arguments that its parser takes as they come and that would fail only in the run (a
    device torch refuses, no thread, an output folder it cannot write), checked before it imports its cases."""
    p = bench_parser(prog)
    args = p.parse_args(argv)  # its usage errors, and --help, came before (thunder_ext_cli.main)
    # the suite turns the cache off, but for cases with caches of their own, which keep to its size limit
    check_cache_settings(p, uses_cache=False)
    if why := device_error(args.device):
        fail(p, why)
    if args.threads < 1:
        fail(p, f"--threads {args.threads}: at least 1")
    if args.out is not None and (why := folder_error("--out", args.out)):
        fail(p, why)


def run(command: str, argv: Sequence[str], prog: str) -> None:
    """``thunder-ext command argv``, its arguments parsed (``thunder_ext_cli.main``)."""
    if command == "bench":
        check_bench(argv, prog)
        from thunder_ext.benchmarks.suite import main
    elif command == "cache":
        from thunder_ext.tools.cache import main
    else:
        from thunder_ext.tools.demo import main
    main(argv, prog=prog)


if __name__ == "__main__":  # python -m thunder_ext.tools.cli: the command line, after the package's import
    from thunder_ext_cli import main as cli_main

    cli_main()
