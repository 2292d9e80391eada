"""``thunder_ext.jit``: ``thunder.jit`` with in-place writes functionalized, proved and run in place."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import thunder
from thunder import jit as thunder_jit  # bound at import, so replacing ``thunder.jit`` by ours cannot recurse
from thunder.core.transforms import Transform
from thunder.extend import Executor

from thunder_ext.executors import inplace_ex
from thunder_ext.optim import JittedOptimizerStep, is_optimizer_step
from thunder_ext.transforms import InplaceDecision, InplaceTransform


def jit(
    fn: Callable,
    /,
    *,
    executors: Sequence[Executor | str] | None = None,
    transforms: Sequence[Transform] | None = None,
    strict: bool = False,
    **kwargs: Any,
) -> Callable:
    """A drop-in for ``thunder.jit``: same arguments, same result, in-place writes run in place.

    The caller's ``executors`` (thunder's defaults if None) and ``transforms`` are kept; the
    extension's executor goes first and its transform last, so it sees the final trace.
    ``strict=True`` raises instead of falling back to a copy for a write it cannot prove.

    With nvFuser among the executors (thunder's defaults include it where it loads), its fusion
    pass takes CUDA writes into its regions, and the transform proves each or gives it back to
    the PyTorch executor (docs/gpu.md).

    ``fn`` may be the ``step`` of a ``torch.optim`` SGD, Adam or AdamW: its functional update is jitted
    (``thunder_ext.optim``).
    """
    if is_optimizer_step(fn):
        return JittedOptimizerStep(fn.__self__, jit, executors=executors, transforms=transforms, strict=strict, **kwargs)
    executors = thunder.get_default_executors() if executors is None else executors
    return thunder_jit(
        fn,
        executors=[inplace_ex, *executors],
        transforms=[*(transforms or ()), InplaceTransform(strict=strict)],
        **kwargs,
    )


def inplace_decisions(jitted: Callable) -> list[InplaceDecision]:
    """How each ``copy_to_out_`` of the computation trace that ran last runs, and why: the trace that
    ``thunder.last_traces(jitted)`` shows, whichever cache entry it belongs to."""
    transform = next((t for t in thunder.compile_data(jitted).transforms if isinstance(t, InplaceTransform)), None)
    if transform is None:
        raise ValueError("this function was not compiled with thunder_ext's InplaceTransform")
    # the last recorded trace: transforms after the extension's may append traces of their own
    return next((transform.decisions[t] for t in reversed(thunder.last_traces(jitted)) if t in transform.decisions), [])
