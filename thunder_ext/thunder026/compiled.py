"""What the extension reads or sets on thunder 0.2.6's compiled objects beyond their public methods.

- ``refresh_thunder_module``: a ``ThunderModule`` snapshots its module's buffers (``set_buffer`` replaces one)
  and submodules (``_module_cache``, private: its only setter is construction) when it is made, and its
  prologue reads them there; a KV cache that grows gives it new buffers and caches. Retired by: a
  ``ThunderModule`` that reads its module's submodules at each call, or a public way to refresh them.
- ``synced_members``: a ``ThunderModule``'s prologue unpacks its module's submodules, parameters and buffers from
  that snapshot, while the interpreter traces the module itself: a submodule replaced or a parameter rebound after
  the snapshot was traced as the new one and run with the old one (stock thunder computes with the old weights). The
  extension's compilations make the snapshot the module's again, and their prologues check that it still is; but
  for the entries a transform set, which ``note_members``, called as thunder makes the module, tells from the
  module's members. Retired by: the same.
- ``compiled_module``: the module a ``ThunderModule`` compiles (``_model``). Retired by: a public accessor.
- ``thunderfx_backend``: the ``ThunderCompiler`` a ``thunderfx`` result compiles with (``_backend``). Retired by: a
  public accessor.
- ``share_compile_data``: ``thunder.compile_data`` and ``thunder.compile_stats`` read an object's ``_lc_cd`` and
  ``_lc_cs``; an object that stands for a jitted function (an optimizer's step) points them at that function's.
  Retired by: a public way to register what those functions read.
"""

from __future__ import annotations

import weakref

import torch
from thunder.core.compile_data import get_compile_data
from thunder.core.module import ThunderModule
from thunder.dynamo import ThunderCompiler
from thunder.dynamo.compiler import ThunderFXCompiledObject


def compiled_module(model: object) -> object:
    """The module ``model`` compiles where it is a ``ThunderModule``; else ``model`` itself."""
    return model._model if isinstance(model, ThunderModule) else model


def thunderfx_backend(compiled: object) -> ThunderCompiler | None:
    """The backend of what ``thunderfx`` returned; None for anything else."""
    return compiled._backend if isinstance(compiled, ThunderFXCompiledObject) else None


def refresh_thunder_module(model: ThunderModule, buffers: dict[str, torch.Tensor]) -> None:
    """``model`` sees its module's new ``buffers`` and submodules."""
    for name, tensor in buffers.items():
        model.set_buffer(name, tensor)
    model._module_cache.update(compiled_module(model).named_modules())


_SNAPSHOTS = {"_module_cache": "_modules", "_overrides_parameters": "_parameters", "_overrides_buffers": "_buffers"}
# per ThunderModule, the snapshot's entries that were not the module's when first synced and were not changed on the
# module since it was made: a transform's (thunder's ``transform_module`` sets them, a quantized weight say), which
# stay as it set them
_TRANSFORMS_OWN: weakref.WeakKeyDictionary[ThunderModule, frozenset[tuple[str, str]]] = weakref.WeakKeyDictionary()
# per ThunderModule, the id of each snapshot entry that was the module's member when the extension's transform saw it
# made (``note_members``): where the snapshot still holds that member and the module another, the module changed
_MEMBERS_WHEN_MADE: weakref.WeakKeyDictionary[ThunderModule, dict[tuple[str, str], int]] = weakref.WeakKeyDictionary()
Steps = tuple[tuple[str, str], ...]


def thunder_module_compiling(module: object) -> ThunderModule | None:
    """The ``ThunderModule`` of the compilation under way whose module is ``module``, if any."""
    tm = get_compile_data()._thunder_module_map.get(id(module))
    return tm if isinstance(tm, ThunderModule) and tm._model is module else None


def note_members(model: ThunderModule) -> None:
    """Note which of ``model``'s snapshot entries are its module's members: called as thunder makes it (a
    transform's ``transform_module``), before any call, so that a member the user replaces on the module before the
    first compilation (a load from the compile cache may stand for it) is not taken for a transform's own."""
    live = _members(model)
    _MEMBERS_WHEN_MADE[model] = {(kind, name): id(v) for kind, members in live.items()
                                 for name, v in getattr(model, kind).items() if members.get(name) is v}  # fmt: skip


def _members(model: ThunderModule) -> dict[str, dict]:
    """The module's submodules, parameters and buffers now, by the snapshot they stand for."""
    return {kind: dict(members()) for kind, members in (("_module_cache", model._model.named_modules),
            ("_overrides_parameters", model._model.named_parameters),
            ("_overrides_buffers", model._model.named_buffers))}  # fmt: skip


def synced_members(model: ThunderModule) -> list[tuple[Steps, Steps]]:
    """Make ``model``'s snapshot its module's submodules, parameters and buffers again (but a transform's entries),
    and return each entry that is the module's as two paths: from the module (``_modules``, ``_parameters`` and
    ``_buffers`` items) and from ``model`` (its snapshot's item)."""
    live = _members(model)
    own = _TRANSFORMS_OWN.get(model)
    if own is None:
        when_made = _MEMBERS_WHEN_MADE.get(model, {})
        own = _TRANSFORMS_OWN[model] = frozenset(
            (kind, name) for kind, members in live.items() for name, v in getattr(model, kind).items()
            if members.get(name) is not v and when_made.get((kind, name)) != id(v)
        )  # fmt: skip
    paths = []
    for kind, members in live.items():
        snapshot = getattr(model, kind)  # changed in place: thunder's methods hold it
        kept = {name: v for name, v in snapshot.items() if (kind, name) in own}
        snapshot.clear()
        snapshot.update(members)
        snapshot.update(kept)
        paths += [(_member_path(kind, name), (("attr", kind), ("item", name)))
                  for name in members if name and (kind, name) not in own]  # fmt: skip
    return paths


def _member_path(kind: str, name: str) -> Steps:
    *modules, last = name.split(".")
    steps = tuple(step for m in modules for step in (("attr", "_modules"), ("item", m)))
    return (*steps, ("attr", _SNAPSHOTS[kind]), ("item", last))


def share_compile_data(holder: object, jitted: object) -> None:
    """``thunder.compile_data(holder)`` and ``thunder.compile_stats(holder)`` answer those of ``jitted``."""
    holder._lc_cd, holder._lc_cs = jitted._lc_cd, jitted._lc_cs
