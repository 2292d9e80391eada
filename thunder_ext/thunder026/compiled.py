"""What the extension reads or sets on thunder 0.2.6's compiled objects beyond their public methods.

- ``refresh_thunder_module``: a ``ThunderModule`` snapshots its module's buffers (``set_buffer`` replaces one)
  and submodules (``_module_cache``, private: its only setter is construction) when it is made, and its
  prologue reads them there; a KV cache that grows gives it new buffers and caches. Retired by: a
  ``ThunderModule`` that reads its module's submodules at each call, or a public way to refresh them.
- ``compiled_module``: the module a ``ThunderModule`` compiles (``_model``). Retired by: a public accessor.
- ``thunderfx_backend``: the ``ThunderCompiler`` a ``thunderfx`` result compiles with (``_backend``). Retired by: a
  public accessor.
- ``share_compile_data``: ``thunder.compile_data`` and ``thunder.compile_stats`` read an object's ``_lc_cd`` and
  ``_lc_cs``; an object that stands for a jitted function (an optimizer's step) points them at that function's.
  Retired by: a public way to register what those functions read.
"""

from __future__ import annotations

import torch
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


def share_compile_data(holder: object, jitted: object) -> None:
    """``thunder.compile_data(holder)`` and ``thunder.compile_stats(holder)`` answer those of ``jitted``."""
    holder._lc_cd, holder._lc_cs = jitted._lc_cd, jitted._lc_cs
