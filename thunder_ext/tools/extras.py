"""What each command needs beyond the base install, checked before the command does anything."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

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
