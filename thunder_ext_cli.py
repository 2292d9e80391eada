"""thunder-ext: the project's command line; each command takes --help.

Outside the package: ``import thunder_ext`` imports thunder and torch (about 5 s), so every parser is here, with the
standard library alone; --help and a usage error answer before ``thunder_ext.tools.cli`` runs the command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# what each command does and how long it takes, for `thunder-ext --help`
COMMANDS = {
    "demo": "decode 12 tokens with a small litgpt model under eager, thunder.jit and thunder_ext.jit; print "
    "the in-place writes and the time per token (about 2 minutes on a 2-core CPU, most of it compiling)",
    "bench": "run the benchmark suite and write its tables and plots (a full run: tens of minutes on a "
    "2-core CPU; --quick: about 15 minutes, into a temporary folder)",
    "cache": "list the compile cache's entries (where it lives, what each holds, its size and last use); "
    "thunder-ext cache clear removes them",
}

# the demo's sizes (thunder_ext/tools/demo.py), which its --help states
PROMPT_TOKENS = 8
ROUNDS = 3  # the blocks of the timing, in which the runners take turns
TOKENS = 12

# the benchmark suite's cases (thunder_ext.benchmarks.suite.CASES runs them) and where a full run writes
BENCH_CASES = ("kv_write", "decode", "generate", "generate_session", "hf_generate", "prefill", "adam", "compile",
               "compile_ahead", "compile_scaling", "kv_idioms", "requires_grad", "entry_points", "warm_start",
               "guard_cost", "moe_decode")  # fmt: skip
BENCH_DOCS = Path("docs/benchmarks")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="thunder-ext", description=__doc__.splitlines()[0])
    commands = p.add_subparsers(dest="command", required=True, metavar="command")
    for name, text in COMMANDS.items():
        # the command's own parser reads its arguments (and its --help)
        commands.add_parser(name, help=text, add_help=False)
    return p


def demo_parser(prog: str = "python -m thunder_ext.tools.demo") -> argparse.ArgumentParser:
    description = (
        "Decode with a small litgpt model (4 layers) under eager and thunder.jit with litgpt's KV cache, and "
        "thunder_ext.jit with a cache that grows with what it holds (thunder_ext.set_kv_cache): print what the "
        "extension compiles, the in-place KV-cache writes of the execution trace, how each was decided, and the "
        "time per token with its spread. About 2 minutes on a 2-core CPU, most of it thunder compiling."
    )
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--max-seq-length", type=int, default=4096,
        help="positions each KV cache holds, litgpt's max_seq_length and the model's block size (default: 4096); "
        f"at least the {PROMPT_TOKENS}-token prompt, the first decoded token and each call of the timing: --tokens "
        f"and one more per block of turns (so {TOKENS + 1 + ROUNDS + PROMPT_TOKENS} for --tokens {TOKENS})",
    )  # fmt: skip
    parser.add_argument(
        "--tokens", type=int, default=TOKENS, help=f"tokens timed per runner, 2 or more (default: {TOKENS})"
    )
    # as the benchmarks do: a 2-thread OpenMP pool costs milliseconds per op on small VMs (docs/benchmarks.md)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: 1)")
    return parser


def case_names(cases: Sequence[str]) -> Callable[[str], list[str]]:
    """``--cases``' type: the comma-separated names, each one of ``cases``."""

    def names(text: str) -> list[str]:
        chosen = [c.strip() for c in text.split(",") if c.strip()]
        if unknown := [c for c in chosen if c not in cases]:
            raise argparse.ArgumentTypeError(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(cases)}")
        if not chosen:
            raise argparse.ArgumentTypeError(f"{text!r} names no case; choose from {', '.join(cases)}")
        return chosen

    return names


def bench_parser(prog: str = "thunder-ext bench", cases: Sequence[str] = BENCH_CASES) -> argparse.ArgumentParser:
    description = (
        "Run the benchmark suite: each case under every runner, side by side. A full run takes tens of "
        "minutes on a 2-core CPU (each torch.compile runner compiles for up to a minute per configuration) "
        f"and writes tables, plots and targets into {BENCH_DOCS}/; --quick takes about 15 minutes and writes into a "
        "new temporary folder unless --out names one."
    )
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--cases", type=case_names(cases), default=",".join(cases),
                        help=f"comma-separated, from: {', '.join(cases)}")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats (a smoke run, not for the docs)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    # On the 2-core CPU machines here, PyTorch's 2-thread OpenMP pool costs about 3 ms per parallel op
    # (an add of 65,536 floats: 3,100 µs with 2 threads, 14 µs with 1), which would swamp every comparison.
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads on the CPU (default: 1)")
    parser.add_argument(
        "--out", type=Path,
        help=f"where tables and plots go (default: {BENCH_DOCS}; with --quick, a new temporary folder)",
    )  # fmt: skip
    return parser


def cache_parser(prog: str = "python -m thunder_ext.tools.cache") -> argparse.ArgumentParser:
    description = (
        "`thunder-ext cache`: the compile cache's entries (what was compiled, for which arguments, its size, when "
        "last used) and the files no compilation reads, removing nothing; `thunder-ext cache clear` removes them all."
    )
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("action", nargs="?", choices=["list", "clear"], default="list")
    return parser


PARSERS: dict[str, Callable[[str], argparse.ArgumentParser]] = {
    "demo": demo_parser,
    "bench": bench_parser,
    "cache": cache_parser,
}


def main(argv: Sequence[str] | None = None) -> None:
    args, rest = parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    prog = f"thunder-ext {args.command}"
    PARSERS[args.command](prog).parse_args(rest)  # --help, or a usage error: exits here, with no torch imported
    from thunder_ext.tools.cli import run  # imports thunder and torch

    run(args.command, rest, prog)


if __name__ == "__main__":
    main()
