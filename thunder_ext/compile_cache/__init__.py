"""The compile cache on disk: a later process that makes a compilation again loads it instead of tracing.

What is stored of a compilation is thunder's cache entry as program texts (``thunder026/cache_entries.py``), with
the extension's decisions: no tensor data. When a compiled function is made (``thunder_ext.jit``, the plugin
``"inplace"``, ``set_kv_cache``'s growth copy), the entries stored under its key are loaded into thunder's own list,
where each runs only for a call its prologue accepts (``attach.py``); each compilation after that is saved. A loaded
entry's traces are compiled afresh where they are looked at (``loaded_traces.py``). A block program
(``thunder_ext.jit``'s ``block_programs``) is also stored apart, keyed by its block's traced ops, for any
compilation of the same blocks to load (``attach.py``'s ``_BlockStore``). The key and the code files each entry
depends on (``key.py``) hold what no prologue checks; the files on disk follow ``store.py``'s rules (trusted,
atomic, checked, least recently used goes first).

On by default (each entry is guarded by every value its trace read, ``thunder026/python_guards.py``, and by the
Python state its object reaches, ``state.py``); off for one compilation with ``compile_cache=False``, everywhere
with ``THUNDER_EXT_CACHE=0``, and only where a compilation asks with ``THUNDER_EXT_CACHE=opt-in``
(``store.enabled``); listed and cleared by ``thunder-ext cache`` and ``thunder-ext cache clear``.
"""

from __future__ import annotations

from thunder.core.transforms import Transform

from thunder_ext.compile_cache.attach import attach, cache_loads
from thunder_ext.compile_cache.loaded_traces import LoadedTraces

__all__ = ["CompileCache", "LoadedTraces", "attach", "cache_loads"]


class CompileCache(Transform):
    """The cache for a module that thunder compiles with this among its transforms: thunder calls
    ``transform_module`` once it has made the ``ThunderModule``. Changes no trace, so no key holds it.
    ``requested``: the compilation's ``compile_cache=`` (None: as ``THUNDER_EXT_CACHE`` says)."""

    compile_cache_skips = True

    def __init__(self, requested: bool | None = None) -> None:
        self.requested = requested

    def transform_module(self, model) -> None:
        attach(model, self.requested)
