"""Executors that run ``copy_to_out_``: PyTorch (CPU and CUDA), thunder's torch.compile executor (inside its
regions), and nvFuser where it and CUDA are there."""

import thunder_ext.executors.torch_compile_inplace  # noqa: F401  (registers copy_to_out_ with torch_compile_ex)
from thunder_ext.executors.nvfuser_inplace import nvfuser_inplace_available
from thunder_ext.executors.torch_inplace import inplace_ex

__all__ = ["inplace_ex", "nvfuser_inplace_available"]
