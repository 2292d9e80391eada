"""Where the integrations plug into the core, which calls these hooks and never names an integration.

Each integration (``thunder_ext/integrations/``) registers its hooks when ``thunder_ext`` is imported
(``thunder_ext/integrations/__init__.py``); one whose package is optional (litgpt, transformers) registers a
hook that imports it only once the user's program has. A hook that patches a user's object says so where it
is registered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from thunder.core.recipe import Lookaside

# ``(fn, jit, options) -> compiled or None``: ``fn`` compiled another way than ``thunder.jit(fn)`` (an optimizer's
# ``step``, whose functional update is jitted), or None where the hook does not take ``fn``
JitReplacement = Callable[[Callable, Callable[..., Callable], dict[str, Any]], "Callable | None"]


@dataclass
class Hooks:
    """The lists the core reads, in the order hooks were registered."""

    # run once by ``adapt_thunder``, after the extension's own changes to thunder: an integration's entries in
    # thunder's tables (``tensor_scatter_``'s symbol)
    adaptations: list[Callable[[], None]] = field(default_factory=list)
    # ``(module name, hook)``: run with the module by ``adapt_thunder`` once the program has imported it (each hook
    # once): an integration's entries for a package the extension does not import itself (litgpt's ``LLaMAMoE``)
    adaptations_once_imported: list[tuple[str, Callable[[ModuleType], None]]] = field(default_factory=list)
    # ``thunder_ext.jit``: the first that takes ``fn`` compiles it
    jit_replacements: list[JitReplacement] = field(default_factory=list)
    # ``thunder_ext.jit``: called with ``(fn, jitted)`` once ``fn`` is jitted
    after_jit: list[Callable[[Callable, Callable], None]] = field(default_factory=list)
    # ``thunder_ext.thunderfx``: called with ``fn`` once it is compiled
    after_thunderfx: list[Callable[[Callable], None]] = field(default_factory=list)
    # the ``thunder.compile`` plugin's lookasides: each returns those it adds
    plugin_lookasides: list[Callable[[], list[Lookaside]]] = field(default_factory=list)
    # the compile cache's state digest (``compile_cache/state.py``): ``obj -> names`` of attributes of ``obj`` it leaves
    # out, each seeded per process (a ``hash()`` of a string), which would make equal objects' digests differ in every
    # process; a traced read of one is still checked (``thunder026/python_guards.py``)
    state_seeded: list[Callable[[object], tuple[str, ...]]] = field(default_factory=list)


HOOKS = Hooks()
