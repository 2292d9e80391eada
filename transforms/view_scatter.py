"""``scatter_into_view(flat, value, shape, steps)``: the flattened base ``flat`` of a tensor of ``shape`` with the
view ``steps`` take of it replaced by ``value``, the op ``view_writes`` scatters a write through a view with.

Rule: its value is one ``index_copy`` of ``value``'s elements into ``flat`` at ``view_positions`` (any chain of view
ops is one op); its gradient is the view's, as PyTorch's ``slice_scatter``, ``select_scatter`` and
``diagonal_scatter`` have it: the base's cotangent with the view's elements zeroed, and for ``value`` the view
``steps`` take of the base's cotangent. thunder's gradient of the ``index_copy`` would be the same numbers, but a
``take`` of the cotangent at the positions: a gather that torch 2.9.1's Inductor (x86_64, AVX-512 code) cannot
compile beside the ``pad`` of a view's gradient in one region (``CppCompileError``, no ``VecMask<int64_t, 2>(bool)``:
``tests/fuzz_regressions/requires_grad/found_0cd5fce8f9aa.py``, ``found_307e2c1d8ecc``, ``found_c2d12a70ea4a``).
Views cost nothing and leave each fusion strided loads, no indirect ones.

``scatter_into_view_`` writes it into ``flat``, as thunder's in-place ops are written (its functional op, then
``prims.copy_``), which functionalization makes a write of ``flat`` that reads it (as ``index_copy_``).

``steps`` are ``view_positions``'s: each view op's ``torch.Tensor`` method, its arguments after the tensor, its
keyword arguments.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.compile_data import get_compile_data
from thunder.core.prims import get_grad, put_grad
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.core.transforms import register_grad

from thunder_ext.executors.torch_inplace import ViewSteps, view_positions
from thunder_ext.transforms.narrow_as_slice import narrow_as_slice

ViewCall = tuple[str | Callable[..., Any], tuple, tuple]  # a ``ViewSteps`` step, or one with the op to call


def view_of(t: TensorProxy, steps: Sequence[ViewCall], shape: tuple[int, ...]) -> TensorProxy:
    """The view ``steps`` take of ``t``, whose shape is ``shape``; a step's op is a ``torch.Tensor`` method's name
    or a function of the tensor. ``narrow`` is taken as the slice it is (whose gradient thunder's torch.compile
    executor compiles; ``narrow``'s it cannot), and a view of all of a one-element ``t`` as ``t`` reshaped (torch
    2.9.1's Inductor loses the gradient that the ``take`` of a one-element ``diagonal`` sends back beside another:
    ``requires_grad/found_77a324cfc711``)."""
    if steps and math.prod(t.shape) == 1 and math.prod(shape) == 1:
        return ltorch.reshape(t, shape)
    for op, args, kwargs in steps:
        if op == "getitem":
            t = ltorch.getitem(t, *args)
        elif op == "narrow":
            t = narrow_as_slice(t, *args)
        else:
            t = (getattr(t, op) if isinstance(op, str) else functools.partial(op, t))(*args, **dict(kwargs))
    return t


def _positions(flat: TensorProxy, value: TensorProxy, shape: tuple[int, ...], steps: ViewSteps) -> TensorProxy:
    return view_positions(shape, steps, flat.device, numel=math.prod(value.shape))


def _index_copy(flat: TensorProxy, positions: TensorProxy, value: TensorProxy) -> TensorProxy:
    return ltorch.index_copy(flat, 0, positions, ltorch.reshape(value, (-1,)))


def _scatter_into_view(flat: TensorProxy, value: TensorProxy, shape: tuple[int, ...], steps: ViewSteps) -> TensorProxy:
    return _index_copy(flat, _positions(flat, value, shape, steps), value)


scatter_into_view = Symbol(
    name="scatter_into_view", meta=_scatter_into_view, id="thunder_ext.scatter_into_view", is_prim=False
)


def _scatter_into_view_grad(
    flat: TensorProxy, value: TensorProxy, shape: tuple[int, ...], steps: ViewSteps
) -> TensorProxy:
    positions = _positions(flat, value, shape, steps)
    new = _index_copy(flat, positions, value)
    grad = get_grad(new)
    put_grad(flat, ltorch.scatter(grad, 0, positions, value=0))
    put_grad(value, view_of(ltorch.reshape(grad, shape), steps, tuple(value.shape)))
    return new


register_grad(scatter_into_view, _scatter_into_view_grad)


def _scatter_into_view_(flat: TensorProxy, value: TensorProxy, shape: tuple[int, ...], steps: ViewSteps) -> TensorProxy:
    # thunder's form of an in-place op (``index_copy_``): its functional op, then ``prims.copy_`` into the target
    compile_data = get_compile_data()
    grad_enabled = compile_data.is_grad_enabled if compile_data is not None else False
    return prims.copy_(scatter_into_view(flat, value, shape, steps), flat, grad_enabled=grad_enabled)


scatter_into_view_ = Symbol(
    name="scatter_into_view_",
    meta=_scatter_into_view_,
    id="thunder_ext.scatter_into_view_",
    is_prim=False,
    tags=(prims.OpTags.IN_PLACE,),
)
