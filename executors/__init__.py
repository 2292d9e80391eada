"""Executors that run ``copy_to_out_``: PyTorch (CPU and CUDA)."""

from thunder_ext.executors.torch_inplace import inplace_ex

__all__ = ["inplace_ex"]
