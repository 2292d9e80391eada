"""Executors that run ``copy_to_out_``: PyTorch (CPU and CUDA), and nvFuser where it and CUDA are there."""

from thunder_ext.executors.nvfuser_inplace import nvfuser_inplace_available
from thunder_ext.executors.torch_inplace import inplace_ex

__all__ = ["inplace_ex", "nvfuser_inplace_available"]
