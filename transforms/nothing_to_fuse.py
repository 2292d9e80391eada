"""No torch.compile region that has nothing to fuse: one that only views, selects and gathers runs op by op.

Rule (``run_regions_with_nothing_to_fuse_eagerly``, on the execution trace, before the checker): a region of
thunder's torch.compile executors whose every op returns a view of its input or reads elements of it by index
(``index_select``, ``embedding``, ``getitem``), with no arithmetic and no write, runs its ops on the PyTorch
executor instead, each under its own output name.

Inductor has nothing to fuse in such a region: each op is a kernel of its own, or none, either way. Compiling it
costs each compilation about a second (litgpt's embedding and its RoPE selects, a region of their own between
block programs: 1.2 s at a decode step), and each call Dynamo's guards and wrappers. The values and the order
of the ops are the region's, so what the trace computes does not change; a region that computes anything else
stays compiled. The trace's ``del`` statements are placed anew, after each tensor's last use.
"""

from __future__ import annotations

import thunder.torch as ltorch
from thunder.core.prims import PrimIDs
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.transforms.op_kinds import is_view_op, thunder_op_id, written_tensors
from thunder_ext.transforms.regions.torch_compile import TORCH_COMPILE_EXECUTORS
from thunder_ext.transforms.trace_index import TraceIndex
from thunder_ext.transforms.traced import on_torch_executor

_GATHERS = frozenset({ltorch.index_select.id, ltorch.embedding.id, ltorch.getitem.id})  # read elements by index


def _only_moves_data(op: BoundSymbol) -> bool:
    return not written_tensors(op) and (is_view_op(op) or thunder_op_id(op) in _GATHERS)


def has_nothing_to_fuse(region: BoundSymbol) -> bool:
    """Whether ``region`` is a torch.compile region whose ops only view, select and gather."""
    sym = region.sym
    return sym.is_fusion and sym.executor in TORCH_COMPILE_EXECUTORS and bool(region.subsymbols) and all(
        _only_moves_data(op) for op in region.subsymbols)  # fmt: skip


def run_regions_with_nothing_to_fuse_eagerly(trace: TraceCtx) -> TraceCtx:
    """Each torch.compile region with nothing to fuse (``has_nothing_to_fuse``) replaced by its ops on the PyTorch
    executor (module docstring)."""
    if not any(has_nothing_to_fuse(b) for b in trace.bound_symbols):
        return trace
    ops: list[BoundSymbol] = []  # without the dels, which ``rewritten`` places anew
    for b in trace.bound_symbols:
        if has_nothing_to_fuse(b):
            ops += [torch_op for op in b.subsymbols for torch_op in on_torch_executor(op)]
        elif b.sym.id != PrimIDs.DEL:
            ops.append(b)
    return TraceIndex(ops).rewritten(trace, "thunder_ext: torch.compile regions with nothing to fuse run eagerly")
