"""``thunder-ext``: the project's command line. ``thunder-ext bench`` runs the benchmark suite,
``thunder-ext demo`` the decode demo; each takes ``--help``."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="thunder-ext", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["bench", "demo"])
    parser.add_argument("args", nargs=argparse.REMAINDER, help="passed on to the command")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    warnings.filterwarnings("ignore", message="transformer_engine module not found")  # thunder's, at import
    if args.command == "bench":
        from thunder_ext.benchmarks.suite import main as run
    else:
        from thunder_ext.demo import main as run
    run(args.args)
