"""Operators that in-place workloads need and thunder 0.2.6 lacks, registered through thunder's own tables.

The one place where the extension adds to thunder's globals; importing ``thunder_ext`` applies it, so
stock ``thunder.jit`` gains it too. Each entry is registered only where thunder has none.

- ``tensor % n``: thunder 0.2.6 defines ``TensorProxy.__mod__`` but registers no ``"mod"`` method, so
  the operator fails with ``TypeError: 'NoneType' object is not callable``. litgpt's sliding-window
  cache writes at ``input_pos % max_cache_len`` (a circular cache); Python's ``%`` on tensors is
  ``torch.remainder``.
"""

import thunder.torch as ltorch
from thunder.torch.langctx import _method_name_to_fn_map, register_method

if "mod" not in _method_name_to_fn_map:
    register_method("mod", ltorch.remainder)
