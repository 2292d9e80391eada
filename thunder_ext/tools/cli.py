"""thunder-ext: the project's command line; each command takes --help."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

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


def main(argv: Sequence[str] | None = None) -> None:
    args, rest = parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    prog = f"thunder-ext {args.command}"
    if args.command == "bench":
        from thunder_ext.benchmarks.suite import main as run
    elif args.command == "cache":
        from thunder_ext.tools.cache import main as run
    else:
        from thunder_ext.tools.demo import main as run
    run(rest, prog=prog)


if __name__ == "__main__":
    main()
