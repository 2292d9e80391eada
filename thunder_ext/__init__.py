"""thunder-ext: safe, free in-place updates under lightning-thunder.

- ``copy_to_out_``: the primitive "write ``computed`` into ``out``" (``thunder_ext.primitive``).
- ``thunder_ext.transforms``: the functionalization pass and the aliasing checker.
- ``thunder_ext.executors``: the executors that run proven writes in place (PyTorch; nvFuser where it loads,
  ``nvfuser_inplace_available()`` says why not).
- ``jit``: ``thunder.jit`` with all of the above; ``Inplace``, the same as the ``thunder.compile`` plugin
  ``"inplace"``; ``ThunderCompiler`` and ``thunderfx``, the same as thunder's ``torch.compile`` backend.
- ``inplace_decisions``: how each write of what ran last runs, and why, whichever way it was compiled.
- ``tensor_scatter_``: ONNX TensorScatter-24 (and a packed form) as one in-place write (``thunder_ext.tensor_scatter``).
"""

import importlib
import warnings

# thunder warns at import that an optional GPU library is absent; only that warning, only during the import
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="transformer_engine module not found", category=UserWarning)
    importlib.import_module("thunder")

import thunder_ext.thunder_gaps  # noqa: F401, E402  (registers what thunder 0.2.6 lacks; see the module)
import thunder_ext.inplace_errors  # noqa: F401, E402  (in-place ops' trace-time errors name the op and tensors)
from thunder_ext.executors import inplace_ex, nvfuser_inplace_available
from thunder_ext.decisions import inplace_decisions
from thunder_ext.dynamo import ThunderCompiler, thunderfx
from thunder_ext.jit import jit
from thunder_ext.plugin import DefaultExecutorsRecipe, Inplace  # registers the plugin "inplace"
from thunder_ext.primitive import CopyToOutError, copy_to_out_
from thunder_ext.tensor_scatter import tensor_scatter_
from thunder_ext.transforms import (
    AliasedArgumentsError,
    InplaceDecision,
    InplaceOrderingError,
    InplaceTransform,
    UnprovenInplaceError,
)

__all__ = [
    "AliasedArgumentsError",
    "CopyToOutError",
    "DefaultExecutorsRecipe",
    "Inplace",
    "InplaceDecision",
    "InplaceOrderingError",
    "InplaceTransform",
    "ThunderCompiler",
    "UnprovenInplaceError",
    "copy_to_out_",
    "inplace_decisions",
    "inplace_ex",
    "jit",
    "nvfuser_inplace_available",
    "tensor_scatter_",
    "thunderfx",
]
