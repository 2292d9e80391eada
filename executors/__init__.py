"""Executors that run ``copy_to_out_``: PyTorch (CPU and CUDA), thunder's torch.compile executor (inside its
regions), and nvFuser where it and CUDA are there."""

# The PyTorch executor first: the fusion executors' modules import the passes' analyses, which import it.
from thunder_ext.executors.torch_inplace import inplace_ex  # noqa: I001
import thunder_ext.executors.torch_compile_inplace  # noqa: F401  (copy_to_out_ in torch_compile_ex, its region rules)
from thunder_ext.executors.nvfuser_inplace import nvfuser_inplace_available

__all__ = ["inplace_ex", "nvfuser_inplace_available"]
