"""What each command needs before it does anything: the modules it imports beyond the base install, and settings
that would otherwise fail only after minutes of compiling (the compile cache's environment variables), each
checked up front, a wrong one answered with one line and exit status 2."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
from collections.abc import Sequence
from typing import NoReturn

# the command -> (the modules it imports, the pyproject extra that installs them)
NEEDS: dict[str, tuple[Sequence[str], str]] = {
    "thunder-ext demo": (("litgpt",), "demo"),
    "thunder-ext bench": (("litgpt", "matplotlib", "tqdm", "transformers"), "bench"),
}


def require(command: str) -> None:
    """Exit naming the missing modules and the install command that provides them, if any is missing."""
    modules, extra = NEEDS[command]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(
            f"{command} needs {', '.join(missing)}, not installed here. From the repository root: "
            f'.venv/bin/pip install -c constraints.txt -e ".[{extra}]"'
        )


def fail(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """Exit with status 2 and one line, as argparse words an error; no usage: ``message`` names what to change."""
    parser.exit(2, f"{parser.prog}: error: {message}\n")


def check_cache_settings(parser: argparse.ArgumentParser, *, uses_cache: bool) -> None:
    """Exit (``fail``) where ``THUNDER_EXT_CACHE`` or ``THUNDER_EXT_CACHE_MAX_MB`` holds a value they do not take,
    or, where the command compiles with the cache as ``THUNDER_EXT_CACHE`` says (``uses_cache``) and that is on,
    where the cache would not use its folder."""
    from thunder_ext.compile_cache import store  # imports thunder

    try:
        on = store.enabled()
    except ValueError as e:
        fail(parser, str(e))
    limit = os.environ.get("THUNDER_EXT_CACHE_MAX_MB")
    if limit is not None and not 0 <= _number(limit) < math.inf:
        fail(parser, f"THUNDER_EXT_CACHE_MAX_MB must be a number of megabytes, 0 or more, got {limit!r} (unset: "
                     f"{store.DEFAULT_MAX_MB})")  # fmt: skip
    if uses_cache and on and (why := store.refusal()) is not None:
        fail(parser, f"the compile cache (on) would be off: {why}, or THUNDER_EXT_CACHE=0 to turn the cache off")


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan
