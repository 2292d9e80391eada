"""Where code lies: in an installed package, Python's library or the extension, which the versions pin, or in the
user's files. The compile cache names the first by name (``compile_cache/state.py``, ``key.py``), and the Python
guards check no global of theirs (``thunder026/python_guards.py``)."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig
import types

_LIBRARIES = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def own_folders() -> tuple[str, ...]:
    """The folders of the extension's source (``thunder_ext`` and the packages installed under it from
    ``transforms/`` and ``executors/``), which the key's digest pins. Found, not imported: this module is imported
    below them."""
    specs = [importlib.util.find_spec(f"thunder_ext.{name}") for name in ("transforms", "executors")]
    return (*sys.modules["thunder_ext"].__path__, *(root for s in specs for root in s.submodule_search_locations))


def in_library(obj: types.FunctionType | type | types.ModuleType) -> bool:
    """Whether ``obj``'s code lies in an installed package, Python's library or the extension (or in no file: a
    builtin module), which the versions and the key pin: named, not digested. The extension's own folders are named
    too: it is often installed editable, outside ``site-packages``."""
    pinned = _pinned()
    if isinstance(obj, (type, types.ModuleType)):
        module = obj if isinstance(obj, types.ModuleType) else sys.modules.get(obj.__module__)
        path = getattr(module, "__file__", None)
        return path is None or path.startswith(pinned)
    return obj.__code__.co_filename.startswith(pinned)


@functools.cache
def _pinned() -> tuple[str, ...]:
    return _LIBRARIES + tuple(os.path.join(folder, "") for folder in own_folders())


