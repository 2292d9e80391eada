"""This folder installs as ``thunder_ext.executors`` (pyproject.toml): ``thunder_ext.executors.checks`` is
``executors/checks.py``.

Executors that run ``copy_to_out_`` and the extension's other ops: PyTorch (CPU and CUDA; every op the passes emit,
those that compute in ``torch_inplace``, the checks that refuse a call in ``checks``), thunder's torch.compile
executor (inside its regions; ``torch_compile_inplace``), and nvFuser where it and CUDA are there
(``nvfuser_inplace``). Nothing here imports a pass: what a fusion region may keep is the checker's to decide
(``transforms/regions/``)."""

import thunder_ext.executors.checks  # noqa: F401  (the checks among inplace_ex's ops)
import thunder_ext.executors.torch_compile_inplace  # noqa: F401  (copy_to_out_ among torch_compile_ex's ops)
from thunder_ext.executors.nvfuser_inplace import nvfuser_inplace_available
from thunder_ext.executors.torch_inplace import inplace_ex

__all__ = ["inplace_ex", "nvfuser_inplace_available"]
