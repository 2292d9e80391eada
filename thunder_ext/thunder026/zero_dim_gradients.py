"""A gradient put for a 0-d tensor is summed to its shape.

thunder 0.2.6's prims take a 0-d tensor beside a larger one without broadcasting it (as a number), and their
gradient rules (``_mul_prim_grad``, ``_div_prim_grad``... in ``thunder/core/transforms.py``) put the larger
gradient for it unreduced. thunder sums it back for the function's CPU 0-d inputs only (``vjp``'s "CPU scalar
tensor" case), so a 0-d tensor the function computes (``a * y.sum()``, ``x.diagonal().div_(y[0] + 1)``) receives a
gradient of the wrong shape, and the backward fails (``expand(torch.FloatTensor{[1, 3]}, size=[1])``) or drops it.

Rule (``put_grad``, as ``thunder/core/transforms.py`` names it): a gradient of more dimensions put for a 0-d tensor
is its sum, in the extension's compilations; stock thunder's keep thunder's rule. Retired by: thunder reducing a
broadcast gradient for every 0-d operand.
"""

from __future__ import annotations

from thunder.core import prims
from thunder.core import transforms as thunder_transforms
from thunder.core.proxies import TensorProxy

from thunder_ext.thunder026.scope import compiling_with_extension

_put_grad = prims.put_grad


def put_grad(grad_for: object, grad: object) -> None:
    if (
        isinstance(grad_for, TensorProxy) and isinstance(grad, TensorProxy) and grad_for.ndim == 0 and grad.ndim > 0
        and compiling_with_extension()
    ):  # fmt: skip
        grad = thunder_transforms.sum_to(grad, ())
    _put_grad(grad_for, grad)


def install() -> None:
    """``thunder/core/transforms.py``'s gradient rules put their gradients through ``put_grad``."""
    thunder_transforms.put_grad = put_grad
