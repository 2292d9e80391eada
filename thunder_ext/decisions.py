"""``thunder_ext.inplace_decisions``: how each write of what ran last runs, and why, whatever the entry point."""

from __future__ import annotations

from collections.abc import Callable

import thunder

from thunder_ext.dynamo import thunder_subgraphs
from thunder_ext.transforms import InplaceDecision, InplaceTransform


def inplace_decisions(compiled: Callable) -> list[InplaceDecision]:
    """How each ``copy_to_out_`` of the computation trace that ran last runs, and why: the trace that
    ``thunder.last_traces(compiled)`` shows, whichever cache entry it belongs to.

    ``compiled`` is what ``thunder_ext.jit`` or ``thunder.compile`` returns, under either interpreter, or
    what ``thunder_ext.thunderfx`` or ``torch.compile(..., backend=thunder_ext.ThunderCompiler())``
    returns (or the backend itself): then the decisions of every thunder subgraph that ran, in the
    order they were compiled.
    """
    if thunder.compile_data(compiled) is None:
        subgraphs = [fn for fn in thunder_subgraphs(compiled) if thunder.compile_stats(fn).last_traces is not None]
        return [d for fn in subgraphs for d in inplace_decisions(fn)]
    transform = next((t for t in thunder.compile_data(compiled).transforms if isinstance(t, InplaceTransform)), None)
    if transform is None:
        raise ValueError("this function was not compiled with thunder_ext's InplaceTransform")
    # the last recorded trace: transforms after the extension's may append traces of their own
    return next((transform.decisions[t] for t in reversed(thunder.last_traces(compiled)) if t in transform.decisions), [])
