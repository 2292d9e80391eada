"""The thunder ``Transform`` that plugs the functionalization pass and the checker into ``thunder.jit``."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence

import torch
from thunder.core.compile_data import get_compile_data
from thunder.core.trace import TraceCtx
from thunder.extend import Executor, FusionExecutor

from thunder_ext.executors import inplace_ex
from thunder_ext.regional import RegionalTransform
from thunder_ext.thunder026 import adapt_thunder
from thunder_ext.transforms.block_calls import block_call_decisions, block_program_writes
from thunder_ext.transforms.pipeline import Hook, Role, stages
from thunder_ext.transforms.prove_inplace import InplaceDecision

log = logging.getLogger("thunder_ext")


class InplaceTransform(RegionalTransform):
    """Functionalize in-place writes before execution planning; prove them in place after it, then let
    elementwise ops reuse the buffers of arguments that die at them: the stages of ``transforms/pipeline.py``,
    run at their hooks.

    Also guards the prologue against aliased arguments that thunder would silently compute wrong.

    Needs ``thunder_ext.executors.inplace_ex`` among the executors (``thunder_ext.jit`` adds it).
    ``strict=True`` raises ``UnprovenInplaceError`` for any write that would fall back to a copy.
    ``replay_blocks``: the interpreter traces a repeated block once (``thunder_ext.jit``'s docstring says more);
    what it did in the last compilation is in ``traced_blocks``, and in the compile log. ``block_programs``: a
    replayed block is one call of the block's program, compiled once (``thunder_ext/regional/``, where a call may
    stand for the block's ops: ``transforms/block_calls.py``).
    """

    def __init__(self, *, strict: bool = False, replay_blocks: bool = True,
                 block_programs: bool | None = None) -> None:  # fmt: skip
        adapt_thunder()  # before thunder traces anything for this transform
        super().__init__(replay_blocks=replay_blocks, block_programs=block_programs)
        self.strict = strict
        # Keyed by the trace they describe, so that each cache entry keeps its own and a backward
        # trace's pass cannot overwrite the forward's; ``thunder_ext.inplace_decisions`` looks them up.
        self.decisions: weakref.WeakKeyDictionary[TraceCtx, list[InplaceDecision]] = weakref.WeakKeyDictionary()

    def compile_cache_key(self) -> dict:
        """The options that change what this transform makes of a trace (``thunder_ext.compile_cache``'s key)."""
        return {"strict": self.strict, "replay_blocks": self.replay_blocks, "block_programs": self.block_programs}

    def block_program_writes(self, bsyms, inputs, arguments, output):
        return block_program_writes(bsyms, inputs, arguments, output)

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
        if self.traced_blocks is not None and self.traced_blocks.calls:
            log.info("thunder_ext: traced %s: %s", _traced_name(), self.traced_blocks.summary())
        for stage in stages(Hook.COMPUTATION, Hook.PROLOGUE):
            if stage.hook is Hook.PROLOGUE:
                prologue_trace = stage.run(prologue_trace, computation_trace)
            else:
                computation_trace = stage.run(computation_trace)
        return prologue_trace, computation_trace, epilogue_trace

    def transform_trace_post_optimization(self, computation_trace: TraceCtx, **kwargs) -> TraceCtx:
        decisions: list[InplaceDecision] = []
        for stage in stages(Hook.EXECUTION):
            if stage.role is Role.DECIDES:
                computation_trace, decisions = stage.run(computation_trace, strict=self.strict)
            elif stage.role is Role.PASS or decisions:
                computation_trace = stage.run(computation_trace)
        self.decisions[computation_trace] = decisions + block_call_decisions(computation_trace)
        return computation_trace


def _traced_name() -> str:
    """What thunder is compiling, as the log names it: ``GPT.forward``, or a function's name."""
    fn = get_compile_data().fn
    return f"{type(fn).__name__}.forward" if isinstance(fn, torch.nn.Module) else getattr(fn, "__qualname__", repr(fn))
