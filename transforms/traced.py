"""Tracing new ops into a trace that a pass is building, and the value a write puts into its target."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import thunder.torch as ltorch
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, tracectx


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
