"""Tracing new ops into a trace that a pass is building."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, tracectx


def traced_ops(trace: TraceCtx, op: Callable[[], Any]) -> tuple[Any, list[BoundSymbol]]:
    """``op()``'s result and the bound symbols it records, traced in ``trace`` (which names their proxies) but
    not added to it: the pass places them."""
    trace.push_scope([])
    with tracectx(trace):
        result = op()
    return result, trace.pop_scope()
