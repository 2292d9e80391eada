"""thunder-ext: safe, free in-place updates under lightning-thunder.

- ``copy_to_out_``: the primitive "write ``computed`` into ``out``" (``thunder_ext.primitive``).
- ``thunder_ext.transforms``: the functionalization pass and the aliasing checker.
- ``thunder_ext.executors``: the executors that run proven writes in place (PyTorch; nvFuser where it loads,
  ``nvfuser_inplace_available()`` says why not).
- ``jit``: ``thunder.jit`` with all of the above; ``Inplace``, the same as the ``thunder.compile`` plugin
  ``"inplace"``; ``ThunderCompiler`` and ``thunderfx``, the same as thunder's ``torch.compile`` backend.
- ``inplace_decisions``: how each write of what ran last runs, and why, whichever way it was compiled.
- ``adapt_thunder``: every change the extension makes to thunder 0.2.6's globals, made when its transform is
  first made, not at import (``thunder_ext.thunder026``, which holds all the extension knows of thunder's
  internals).
- ``tensor_scatter_``: ONNX TensorScatter-24 (and a packed form) as one in-place write
  (``thunder_ext.integrations.tensor_scatter``).
- ``set_kv_cache``: a litgpt KV cache that grows in buckets with what it holds, each bucket compiled once
  (``thunder_ext.integrations.growing_cache``; litgpt is an extra, imported when it is first asked for).
- ``GrowingStaticCache``: the same for HF transformers, an HF ``Cache``; ``HFTransformersRecipe``, thunder's
  recipe on any device with that cache as ``generate()``'s default (``thunder_ext.integrations.hf_transformers``;
  imports transformers when first asked for).

Compilations are kept on disk, and a later process loads them instead of tracing (``thunder_ext.compile_cache``;
``THUNDER_EXT_CACHE=0`` turns it off; ``thunder-ext cache`` lists and clears it).

The integrations (``thunder_ext.integrations``) plug into the core through ``thunder_ext.hooks``; the demo, the
command line and the pytest plugin are in ``thunder_ext.tools``.

What the extension compiles is logged on ``logging.getLogger("thunder_ext")`` (``thunder_ext.logs``).
"""

import importlib
import warnings
from typing import Any

import thunder_ext.logs  # the logger's default: compilations are never silent

# thunder warns at import that an optional GPU library is absent, and thunder.dynamo's import of
# torch.utils.cpp_extension logs "No CUDA runtime is found" where a CUDA toolkit has no GPU: only those, only here
with warnings.catch_warnings(), thunder_ext.logs.cuda_home_hidden():
    warnings.filterwarnings("ignore", message="transformer_engine module not found", category=UserWarning)
    importlib.import_module("thunder")
    importlib.import_module("thunder.dynamo")

import thunder_ext.integrations  # noqa: E402, F401  (registers the integrations' hooks)
from thunder_ext.compile_cache import cache_loads  # noqa: E402
from thunder_ext.decisions import inplace_decisions  # noqa: E402
from thunder_ext.dynamo import ThunderCompiler, thunderfx  # noqa: E402
from thunder_ext.executors import inplace_ex, nvfuser_inplace_available  # noqa: E402
from thunder_ext.integrations.tensor_scatter import tensor_scatter_  # noqa: E402
from thunder_ext.jit import jit  # noqa: E402
from thunder_ext.plugin import DefaultExecutorsRecipe, Inplace  # noqa: E402  (registers the plugin "inplace")
from thunder_ext.primitive import CopyToOutError, copy_to_out_  # noqa: E402
from thunder_ext.thunder026 import adapt_thunder  # noqa: E402
from thunder_ext.transforms import (  # noqa: E402
    AliasedArgumentsError,
    ArgumentWriteGradientError,
    InplaceDecision,
    InplaceOrderingError,
    InplaceTransform,
    NonDenseWriteError,
    UnprovenInplaceError,
    ViewWriteGradientError,
)

__all__ = [
    "adapt_thunder",
    "AliasedArgumentsError",
    "ArgumentWriteGradientError",
    "CopyToOutError",
    "DefaultExecutorsRecipe",
    "GrowingKVCache",
    "GrowingStaticCache",
    "HFTransformersRecipe",
    "Inplace",
    "InplaceDecision",
    "InplaceOrderingError",
    "InplaceTransform",
    "NonDenseWriteError",
    "ThunderCompiler",
    "UnprovenInplaceError",
    "ViewWriteGradientError",
    "cache_loads",
    "copy_to_out_",
    "inplace_decisions",
    "inplace_ex",
    "jit",
    "nvfuser_inplace_available",
    "set_kv_cache",
    "tensor_scatter_",
    "thunderfx",
]

# what needs an optional package, imported when first asked for
_MODULE_OF = {
    "set_kv_cache": "integrations.growing_cache",
    "GrowingKVCache": "integrations.growing_cache",
    "GrowingStaticCache": "integrations.hf_transformers",
    "HFTransformersRecipe": "integrations.hf_transformers",
}


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"thunder_ext.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module 'thunder_ext' has no attribute {name!r}")
