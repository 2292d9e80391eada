"""thunder-ext: the project's command line; each command takes --help."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from thunder_ext.tools.extras import check_cache_settings, fail

# torch, thunder and litgpt are imported by the command that runs, once its arguments are checked

# what each command does and how long it takes, for `thunder-ext --help`
COMMANDS = {
    "demo": "decode 12 tokens with a small litgpt model under eager, thunder.jit and thunder_ext.jit; print "
    "the in-place writes and the time per token (about 2 minutes on a 2-core CPU, most of it compiling)",
    "bench": "run the benchmark suite and write its tables and plots (a full run: tens of minutes on a "
    "2-core CPU; --quick: about 15 minutes, into a temporary folder)",
    "cache": "list the compile cache's entries (where it lives, what each holds, its size and last use); "
    "thunder-ext cache clear removes them",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="thunder-ext", description=__doc__.splitlines()[0])
    commands = p.add_subparsers(dest="command", required=True, metavar="command")
    for name, text in COMMANDS.items():
        # the command's own parser reads its arguments (and its --help)
        commands.add_parser(name, help=text, add_help=False)
    return p


class HideCudaHome(logging.Filter):
    """torch's "No CUDA runtime is found, using CUDA_HOME=..." (``torch.utils.cpp_extension``, logged when imported
    on a machine with a CUDA toolkit and no GPU): the commands build no C++ extension, so it tells nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No CUDA runtime is found")


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
    """The benchmark suite's arguments that its own parser takes as they come and that would fail only in the run
    (a device torch refuses, no thread, an output folder it cannot write), checked before it imports its cases.
    The rest is the suite's parser's: its usage errors, and --help, which comes first."""
    if {"-h", "--help"} & set(argv):
        return
    p = argparse.ArgumentParser(prog=prog, add_help=False, exit_on_error=False)
    for flag in ("--cases", "--device", "--threads", "--out"):
        p.add_argument(flag)
    try:
        args, _ = p.parse_known_args(argv)
    except argparse.ArgumentError:  # a flag without its value: the suite's parser says so, with the usage
        return
    # the suite turns the cache off, but for cases with caches of their own, which keep to its size limit
    check_cache_settings(p, uses_cache=False)
    if args.cases is not None and not args.cases.replace(",", "").strip():
        fail(p, f"--cases {args.cases!r}: names no case ({prog} --help lists them)")
    if args.device is not None and (why := device_error(args.device)):
        fail(p, why)
    if args.threads is not None and args.threads.lstrip("-").isdigit() and int(args.threads) < 1:
        fail(p, f"--threads {args.threads}: at least 1")  # not a number: the suite's parser says so
    if args.out is not None and (why := folder_error("--out", Path(args.out))):
        fail(p, why)


def main(argv: Sequence[str] | None = None) -> None:
    args, rest = parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    prog = f"thunder-ext {args.command}"
    logging.getLogger("torch.utils.cpp_extension").addFilter(HideCudaHome())  # before the command imports torch
    if args.command == "bench":
        check_bench(rest, prog)
        from thunder_ext.benchmarks.suite import main as run
    elif args.command == "cache":
        from thunder_ext.tools.cache import main as run
    else:
        from thunder_ext.tools.demo import main as run
    run(rest, prog=prog)


if __name__ == "__main__":
    main()
