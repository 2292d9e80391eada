"""Tracing new ops into a trace that a pass is building, an op as thunder's PyTorch executor runs it, and the value
a write puts into its target."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import thunder.torch as ltorch
from thunder.core import dtypes, prims
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, tracectx
from thunder.executors.passes import transform_for_execution
from thunder.executors.torchex import ex as torch_ex


def traced_ops(trace: TraceCtx, op: Callable[[], Any]) -> tuple[Any, list[BoundSymbol]]:
    """``op()``'s result and the bound symbols it records, traced in ``trace`` (which names their proxies) but
    not added to it: the pass places them."""
    trace.push_scope([])
    with tracectx(trace):
        result = op()
    return result, trace.pop_scope()


def as_written_into(computed: TensorProxy, target: TensorProxy) -> TensorProxy:
    """``computed`` as ``copy_`` writes it into ``target``: broadcast to its shape, converted to its dtype and device
    (itself where it already is). Traced: call it inside ``traced_ops``."""
    if (computed.shape, computed.dtype, computed.device) == (target.shape, target.dtype, target.device):
        return computed
    return ltorch.to(ltorch.expand(computed, target.shape), device=target.device, dtype=target.dtype)


def keeping_history(new: TensorProxy, old: TensorProxy) -> TensorProxy:
    """``new``, read as a value of ``old`` too, whose gradient there is zero: what eager's graph keeps of a value a
    write overwrote (``gradients.overwrites_of_differentiated_values``). Traced: call it inside ``traced_ops``."""
    return ltorch.where(ltorch.full(new.shape, False, device=new.device, dtype=dtypes.bool8), old, new)


def _names(bsym: BoundSymbol) -> set[str]:
    own = {p.name for p in (*bsym.flat_proxy_args, *bsym.flat_proxy_outs)}
    return own.union(*map(_names, bsym.subsymbols))


def on_torch_executor(bsym: BoundSymbol) -> list[BoundSymbol]:
    """``bsym``, a thunder op as a region holds it, as thunder's PyTorch executor runs it, under its own
    output name (thunder's processor names what it rewrites anew; the trace around reads the old name)."""
    trace = TraceCtx()
    trace.names.update(_names(bsym))
    trace.bound_symbols = [bsym, prims.python_return.bind(bsym.output, output=None)]
    *executed, ret = transform_for_execution(trace, (torch_ex,)).bound_symbols
    renamed = {variableify(new): old for new, old in zip(tree_flatten(ret.args[0])[0], tree_flatten(bsym.output)[0])}
    return [b.from_bsym_swap_proxies(renamed) for b in executed]
