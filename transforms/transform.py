"""The thunder ``Transform`` that plugs the functionalization pass and the checker into ``thunder.jit``."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from thunder.core.compile_data import get_compile_data
from thunder.core.trace import TraceCtx
from thunder.core.transforms import Transform
from thunder.extend import Executor, FusionExecutor

from thunder_ext.executors import inplace_ex

from thunder_ext.transforms.aliased_arguments import refuse_unrepresentable_aliased_arguments
from thunder_ext.transforms.functionalize import functionalize_writes
from thunder_ext.transforms.leaf_writes import refuse_differentiated_writes_into_leaves
from thunder_ext.transforms.prove_inplace import InplaceDecision, prove_inplace_writes
from thunder_ext.transforms.reuse_buffers import reuse_dead_buffers
from thunder_ext.transforms.saved_for_backward import saved_values_outlive_writes
from thunder_ext.transforms.user_lines import name_user_lines


class InplaceTransform(Transform):
    """Functionalize in-place writes before execution planning; prove them in place after it, then let
    elementwise ops reuse the buffers of arguments that die at them.

    Also guards the prologue against aliased arguments that thunder would silently compute wrong.

    Needs ``thunder_ext.executors.inplace_ex`` among the executors (``thunder_ext.jit`` adds it).
    ``strict=True`` raises ``UnprovenInplaceError`` for any write that would fall back to a copy.
    """

    def __init__(self, *, strict: bool = False) -> None:
        # imported here: the adapter scopes its changes by this class (``compiling_with_extension``)
        from thunder_ext.adapt_thunder import adapt_thunder

        adapt_thunder()  # before thunder traces anything for this transform
        self.strict = strict
        # Keyed by the trace they describe, so that each cache entry keeps its own and a backward
        # trace's pass cannot overwrite the forward's; ``thunder_ext.inplace_decisions`` looks them up.
        self.decisions: weakref.WeakKeyDictionary[TraceCtx, list[InplaceDecision]] = weakref.WeakKeyDictionary()

    def transform_traces_pre_prologue(
        self, prologue_trace, computation_trace, epilogue_trace, *, executors_list: Sequence[Executor], **kwargs
    ):
        order = list(executors_list)
        first_fuser = next(
            (i for i, ex in enumerate(order) if isinstance(ex, FusionExecutor) and ex != inplace_ex), len(order)
        )
        if inplace_ex not in order or order.index(inplace_ex) > first_fuser:
            raise ValueError(
                "InplaceTransform needs thunder_ext.inplace_ex among the executors, before any fusion executor "
                f"(given: {', '.join(str(ex.name) for ex in executors_list)}): it runs the writes, and its pass "
                "prepares the trace for theirs: "
                "thunder.jit(fn, executors=[thunder_ext.inplace_ex, ...], transforms=[InplaceTransform()]), "
                "or use thunder_ext.jit(fn), which adds both."
            )
        computation_trace = name_user_lines(computation_trace)  # before anything reports a line
        prologue_trace = refuse_unrepresentable_aliased_arguments(prologue_trace, computation_trace)
        prologue_trace = refuse_differentiated_writes_into_leaves(prologue_trace, computation_trace)
        return prologue_trace, functionalize_writes(computation_trace), epilogue_trace

    def transform_trace_post_optimization(self, computation_trace: TraceCtx, **kwargs) -> TraceCtx:
        computation_trace = saved_values_outlive_writes(computation_trace)
        new_trace, decisions = prove_inplace_writes(computation_trace, strict=self.strict)
        # only traces the extension rewrote: it answers for their memory, thunder for the rest
        new_trace = reuse_dead_buffers(new_trace) if decisions else new_trace
        self.decisions[new_trace] = decisions
        return new_trace


def compiling_with_extension() -> bool:
    """Whether the compilation thunder is tracing now carries ``InplaceTransform``: the scope of every change
    ``thunder_ext.adapt_thunder`` makes to what thunder already does."""
    cd = get_compile_data()
    return cd is not None and any(isinstance(t, InplaceTransform) for t in cd.transforms)
