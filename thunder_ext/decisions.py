"""``thunder_ext.inplace_decisions``: how each write of what ran last runs, and why, whatever the entry point."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import thunder

from thunder_ext.compile_cache import LoadedTraces
from thunder_ext.dynamo import thunder_subgraphs_of_last_call
from thunder_ext.thunder026.compiled import compiled_module
from thunder_ext.transforms import InplaceDecision, InplaceTransform


@runtime_checkable
class RunsCompiledWritesFirst(Protocol):
    """A module's ``forward`` that runs compiled writes of its own before the module's compiled call
    (``thunder_ext.integrations.growing_cache.BucketedForward``: the growth copy)."""

    def decisions_before(self) -> list[InplaceDecision]: ...


def inplace_decisions(compiled: Callable) -> list[InplaceDecision]:
    """How each ``copy_to_out_`` of the computation trace that ran last runs, and why: the trace that
    ``thunder.last_traces(compiled)`` shows, whichever cache entry it belongs to.

    ``compiled`` is what ``thunder_ext.jit`` or ``thunder.compile`` returns, under either interpreter, or
    what ``thunder_ext.thunderfx`` or ``torch.compile(..., backend=thunder_ext.ThunderCompiler())``
    returns (or the backend itself): then the decisions of every thunder subgraph that ran, in the
    order they were compiled.

    A module whose calls ``thunder_ext.set_kv_cache`` fits to its buckets lists first the writes of the growth
    copy its last call ran, if any: they ran before the model's.
    """
    if thunder.compile_data(compiled) is None:
        return [d for fn in thunder_subgraphs_of_last_call(compiled) for d in inplace_decisions(fn)]
    transform = next((t for t in thunder.compile_data(compiled).transforms if isinstance(t, InplaceTransform)), None)
    if transform is None:
        raise ValueError("this function was not compiled with thunder_ext's InplaceTransform")
    if thunder.compile_stats(compiled).last_traces is None:  # thunder's own error holds the whole module's repr
        what = type(compiled_module(compiled)).__name__
        raise ValueError(f"thunder_ext.inplace_decisions: the compiled {what} has not run yet: call it first")
    forward = getattr(compiled, "forward", None)
    before = forward.decisions_before() if isinstance(forward, RunsCompiledWritesFirst) else []
    traces = thunder.last_traces(compiled)
    if isinstance(traces, LoadedTraces) and not traces.look.filled:  # loaded, not looked at: the stored ones
        return before + traces.decisions
    # the last recorded trace: transforms after the extension's may append traces of their own
    return before + next((transform.decisions[t] for t in reversed(traces) if t in transform.decisions), [])
