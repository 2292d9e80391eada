"""PyTorch executor for ``copy_to_out_``, on CPU and CUDA tensors alike.

The operators that run writes and what they need:

- ``copy_to_out_`` itself, run as ``out.copy_(computed)``: always correct, costs a full-size
  ``computed`` and a copy. This is what every write runs as until the aliasing checker proves more.
- ``copy_to_out_<op>(*args, out=out)``: the producer of ``computed`` run directly into ``out``'s
  storage, emitted only by the checker (``thunder_ext.transforms.prove_inplace``) once it has proved
  that nothing else needs the storage ``computed`` would have had. Ops that update a base tensor
  (``index_copy``, ``scatter``...) run as the base's in-place method on ``out``, after loading the
  base into ``out`` unless the base already is ``out``; elementwise ops run with ``out=``.
- ``<op>_into(*args, out=buffer)``: an elementwise op computed into a buffer that buffer reuse
  (``thunder_ext.transforms.reuse_buffers``) found dead or about to be overwritten.
- ``checked_index(index, ...)``: an index checked before the torch.compile region that writes or reads at
  it (``executors/torch_compile_inplace.py``, rule 4), raising what the op's form here would.
- ``view_positions(shape, steps, device)``: where each element of a view lies in its base, flattened, which the
  scatter of a differentiated write through a view writes at (``transforms/view_writes.py``); run here, never
  fused, and computed once per shape, view and device.
- ``checked_assert(condition, ...)``: a user's ``assert`` on a tensor, checked when the computation runs
  (``thunder_ext.thunder026.tensor_asserts``), raising the ``AssertionError`` eager raises.

The checks that refuse a call before anything runs (``check_aliased_arguments``, ``check_dense_argument``...) are
operators of this executor too, with the errors they raise, in ``executors/checks.py``.

Every operator the extension's passes emit for an executor to run is registered on this executor, here or there
(``transforms/view_scatter.py``'s scatter is a composite of thunder's ops and ``view_positions``), and this module
imports no pass: passes import it, never the reverse.

The executor is also a fusion executor that fuses nothing: listed before the others (``thunder_ext.jit``,
the plugin and the backend put it first), its fusion pass runs after thunder has claimed every op and
before any other fusion pass, the one point where a pass sees the trace that the fusion passes group. It runs
there the passes the pipeline gives it (``prepare_fusion_with``; ``transforms/pipeline.py`` lists them).
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Callable, Sequence
from types import FrameType

import torch
from thunder.core import devices, dtypes, prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx
from thunder.executors.torchex import ex as torch_ex
from thunder.extend import FusionExecutor, OperatorExecutor, register_executor

from thunder_ext.inplace_errors import named_runtime_error
from thunder_ext.primitive import copy_to_out_


class InplaceExecutor(OperatorExecutor, FusionExecutor):
    """Runs the extension's ops; its fusion pass, the first, runs the passes that prepare the trace for the
    other fusion passes."""

    def __init__(self, name: str, *, version: str) -> None:
        super().__init__(name, version=version)
        self._preparations: tuple[Callable[[TraceCtx], TraceCtx], ...] = ()

    def prepare_fusion_with(self, passes: Sequence[Callable[[TraceCtx], TraceCtx]]) -> None:
        """Run ``passes``, in order, as this executor's fusion pass: given by the pipeline, which imports the
        passes, so that this module imports none."""
        self._preparations = tuple(passes)

    def can_fuse(self, bsym: BoundSymbol) -> bool:
        return False  # claims only what it implements, as an operator executor

    def fusion_pass(self, trace: TraceCtx) -> TraceCtx:
        for prepare in self._preparations:
            trace = prepare(trace)
        return trace


inplace_ex = InplaceExecutor("thunder_ext_inplace", version="0.1")
register_executor(inplace_ex)


def _copy_to_out_impl(computed: torch.Tensor, *, out: torch.Tensor, after=()) -> torch.Tensor:
    return out.copy_(computed)


plain_copy_to_out = inplace_ex.register_operator("copy_to_out_", like=copy_to_out_, fn=_copy_to_out_impl)
inplace_ex.register_implementation(copy_to_out_, plain_copy_to_out)

# ``update_aliases`` that also states that its tensors share storage, which no op of the trace shows: the
# arguments ``thunder_ext.thunder026.alias_updates`` traces apart. thunder's own ``update_aliases`` cannot
# say it: it also renames tensors of different storages together (``q`` and ``k`` before an attention
# reads both), and taking those for one storage would cost in-place writes.
share_storage = inplace_ex.register_operator("share_storage", like=prims.update_aliases, fn=lambda aliases: aliases)


def _update_naming_errors(update: Callable[..., object], out: torch.Tensor, args: tuple, kwargs: dict, caller: FrameType) -> None:
    """``update(out, *args, **kwargs)``, an in-place method of PyTorch's, its error named for the user's line
    that ``caller``, thunder's computation, runs."""
    try:
        update(out, *args, **kwargs)
    except (IndexError, RuntimeError) as error:  # an index out of range; costs nothing until raised
        raise named_runtime_error(update.__name__, (out, *args), kwargs, error, caller) from error


def _base_update(update: Callable[..., object]) -> Callable[..., torch.Tensor]:
    def run(base: torch.Tensor, *args, out: torch.Tensor, **kwargs) -> torch.Tensor:
        if base is not out:
            out.copy_(base)
        _update_naming_errors(update, out, args, kwargs, sys._getframe(1))
        return out

    return run


# The PyTorch executor's form of each op a position check stands for (``torch_compile_inplace``, rule 4)
# that writes, an in-place method of the indexed tensor, and of each that reads.
CHECKED_WRITES = ("index_copy_", "index_add_")
_CHECKED_READS: dict[str, Callable[..., torch.Tensor]] = {
    "index_select": torch.index_select,
    "embedding": lambda weight, dim, index: torch.nn.functional.embedding(index, weight),
}


def _checked_index(index: torch.Tensor, op: str, dim: int, specs: tuple[tuple[tuple[int, ...], dtypes.dtype], ...]) -> torch.Tensor:
    """``index`` once it is known that ``op`` accepts it along ``dim`` of the tensor it indexes; else the error
    that the PyTorch executor's form of ``op`` raises, with nothing written.

    The tensors ``op`` takes besides ``index``, the indexed one first, are computed by the region this check
    precedes, so the error comes from stand-ins of their shapes and dtypes (``specs``): the error names
    those, and the position. None of these ops takes a negative index.
    """
    low, high = torch.aminmax(index) if index.numel() else (0, 0)
    if not 0 <= int(low) <= int(high) < specs[0][0][dim]:
        indexed, *rest = (torch.empty(shape, dtype=dtypes.to_torch_dtype(dtype), device=index.device) for shape, dtype in specs)
        if op in CHECKED_WRITES:
            _update_naming_errors(getattr(torch.Tensor, op), indexed, (dim, index, *rest), {}, sys._getframe(1))
        _CHECKED_READS[op](indexed, dim, index)
    return index


# A rename of its index, so that the region after it reads what it returns: dataflow keeps it first.
checked_index = inplace_ex.register_operator("checked_index", meta=lambda index, *args: TensorProxy(like=index), fn=_checked_index)


def _checked_assert(condition: torch.Tensor, holds: bool, message: tuple, where: str) -> torch.Tensor:
    """``condition`` once ``bool(condition) == holds``; else the ``AssertionError`` of the user's ``assert`` that it
    stands for (``thunder_ext.thunder026.tensor_asserts``): ``message`` holds the assert's arguments, the text where it is
    a constant (none: ``assert cond``), and ``where`` (the user's line) goes into a note."""
    if bool(condition) != holds:
        error = AssertionError(*message)
        error.add_note(where)
        raise error
    return condition


# A rename of its condition, as ``checked_index``; kept where nothing reads it (``DONT_DCE``): a check that fails
# raises, and functionalization orders every later write after it (``may_fail_at_runtime``).
checked_assert = inplace_ex.register_operator(
    "checked_assert",
    meta=lambda condition, *args: TensorProxy(like=condition),
    fn=_checked_assert,
    tags=(prims.OpTags.DONT_DCE,),
)


ViewSteps = tuple[tuple[str, tuple, tuple], ...]  # (torch.Tensor method, its arguments after the tensor, kwargs)
_POSITIONS: dict[str, torch.Tensor] = {}


def _view_positions(shape: tuple[int, ...], steps: ViewSteps, device: torch.device) -> torch.Tensor:
    """The position, in a tensor of ``shape`` flattened, of each element of the view ``steps`` take of it, flattened.

    Computed once per shape, steps and device (a function of them alone) and copied out: a caller may write it."""
    key = repr((shape, steps, device))
    if key not in _POSITIONS:
        positions = torch.arange(math.prod(shape), device=device).reshape(shape)
        for method, args, kwargs in steps:
            positions = (operator.getitem if method == "getitem" else getattr(torch.Tensor, method))(
                positions, *args, **dict(kwargs)
            )
        _POSITIONS[key] = positions.flatten()
    return _POSITIONS[key].clone()


# An opaque op, not fused: its arithmetic is a function of constants, which a fusion would compile per view.
view_positions = inplace_ex.register_operator(
    "view_positions",
    meta=lambda shape, steps, device, *, numel: TensorProxy(shape=(numel,), device=device, dtype=dtypes.int64),
    fn=lambda shape, steps, device, *, numel: _view_positions(shape, steps, devices.to_torch_device(device)),
)


def _with_out(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def run(*args, out: torch.Tensor, **kwargs) -> torch.Tensor:
        return fn(*args, **kwargs, out=out)

    return run


# Keyed by the name of the PyTorch executor's operator that produced `computed`.
# Base updates: the first argument is the tensor being updated (the "base").
_BASE_UPDATES: dict[str, Callable[..., object]] = {
    "index_copy": torch.Tensor.index_copy_,
    "index_add": torch.Tensor.index_add_,
    "index_put": torch.Tensor.index_put_,
    "scatter": torch.Tensor.scatter_,
    "scatter_add": torch.Tensor.scatter_add_,
    "masked_fill": torch.Tensor.masked_fill_,
    "copy_with_setitem_impl": operator.setitem,
}
_ELEMENTWISE = (
    "abs add addcdiv addcmul clamp div exp lerp maximum minimum mul neg pow rsqrt sqrt sub tanh true_divide"
).split()


def _where(condition: torch.Tensor, a, b, *, out: torch.Tensor) -> torch.Tensor:
    # torch.where takes numbers (relu is where(x > 0, x, 0)), but not together with out=
    a, b = (v if isinstance(v, torch.Tensor) else torch.scalar_tensor(v, dtype=out.dtype, device=out.device) for v in (a, b))
    return torch.where(condition, a, b, out=out)


def _fused_meta(*args, out: TensorProxy, **kwargs) -> TensorProxy:
    return TensorProxy(like=out)


def _register(name: str, run: Callable[..., torch.Tensor]):
    return inplace_ex.register_operator(name, meta=_fused_meta, fn=run)


_ELEMENTWISE_RUNS = {name: _with_out(getattr(torch, name)) for name in _ELEMENTWISE} | {"where": _where}
BASE_UPDATE_OPS = {name: _register(f"copy_to_out_{name}", _base_update(u)) for name, u in _BASE_UPDATES.items()}
ELEMENTWISE_OPS = {name: _register(f"copy_to_out_{name}", run) for name, run in _ELEMENTWISE_RUNS.items()}
# The same kernels for buffer reuse (transforms/reuse_buffers.py), named apart: their `out` is a dead
# buffer or the next write's target, not a write of the program.
INTO_OPS = {name: _register(f"{name}_into", run) for name, run in _ELEMENTWISE_RUNS.items()}


# The one place that says which ops have an in-place form; the passes ask these.
def inplace_form(op: BoundSymbol) -> Symbol | None:
    """The operator that runs ``op``, an op of thunder's PyTorch executor, straight into an ``out`` tensor
    (``copy_to_out_<op>``); None where it has none."""
    if op.sym.executor is not torch_ex:
        return None
    return BASE_UPDATE_OPS.get(op.sym.name) or ELEMENTWISE_OPS.get(op.sym.name)


def updates_a_base(op: BoundSymbol) -> bool:
    """Whether ``op`` is one that updates its first argument, the base (``index_copy``, ``scatter``...), whose
    in-place form writes the base's storage."""
    return op.sym.name in BASE_UPDATE_OPS


def into_form(op: BoundSymbol) -> Symbol | None:
    """The operator that runs ``op``, an elementwise op of thunder's PyTorch executor with one result, into a buffer
    of its own choosing (``<op>_into``); None where it has none."""
    if op.sym.executor is not torch_ex or len([o for o in op.flat_proxy_outs if isinstance(o, TensorProxy)]) != 1:
        return None
    return INTO_OPS.get(op.sym.name)


def is_elementwise_write(op: BoundSymbol) -> bool:
    """Whether ``op`` is an elementwise op run straight into its ``out`` (what ``inplace_form`` gives)."""
    return op.sym in _ELEMENTWISE_WRITES


_ELEMENTWISE_WRITES = frozenset(ELEMENTWISE_OPS.values())
