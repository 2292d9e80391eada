"""The extension's stages, in the order they run: the one list that ``InplaceTransform``'s hooks and
``inplace_ex``'s fusion pass read, and that design.md's pipeline shows (``tests/test_architecture.py`` checks it).

Each stage is a pass of ``transforms/``, run at one of four points of thunder's pipeline (``Hook``), each
with its calling convention:

- ``COMPUTATION``, in ``transform_traces_pre_prologue``: ``computation -> computation``, on the trace the
  interpreter made, before autodiff and execution planning;
- ``PROLOGUE``, at the same point: ``(prologue, computation) -> prologue``, a check added to the prologue from
  what the computation (as the stages before it left it) holds;
- ``FUSION``, in ``inplace_ex``'s fusion pass: ``trace -> trace``, after thunder has claimed every op and before
  any other fusion pass groups them (forward and backward traces alike);
- ``EXECUTION``, in ``transform_trace_post_optimization``: ``trace -> trace``, on the final execution trace
  (forward and backward alike). The checker is the one stage that also decides (``DECIDES``: it returns its
  decisions beside the trace); a stage marked ``ONLY_IF_DECIDED`` runs only on a trace the checker decided
  writes of.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from thunder_ext.executors import inplace_ex
from thunder_ext.transforms.aliased_arguments import (
    refuse_arguments_sharing_written_state,
    refuse_unrepresentable_aliased_arguments,
)
from thunder_ext.transforms.aliasing_as_traced import keep_written_storage_aliased_as_traced
from thunder_ext.transforms.argument_containers import guard_argument_containers
from thunder_ext.transforms.block_calls import inline_block_calls_sharing_written_state
from thunder_ext.transforms.functionalize import functionalize_writes
from thunder_ext.transforms.gradient_zeros import give_zeros_their_prims
from thunder_ext.transforms.grad_argument_writes import refuse_differentiated_writes_into_arguments
from thunder_ext.transforms.narrow_as_slice import trace_narrows_as_slices
from thunder_ext.transforms.no_recomputation import pin_reads_of_overwritten_storage
from thunder_ext.transforms.nothing_to_fuse import run_regions_with_nothing_to_fuse_eagerly
from thunder_ext.transforms.prove_inplace import prove_inplace_writes
from thunder_ext.transforms.reuse_buffers import reuse_dead_buffers
from thunder_ext.transforms.saved_for_backward import clone_saved_values_before_writes, clone_saved_values_written_later
from thunder_ext.transforms.uncomputed_writes import keep_uncomputed_writes_out_of_regions
from thunder_ext.transforms.user_lines import name_lines_inside_writes, name_user_lines
from thunder_ext.transforms.view_writes import scatter_writes_through_views


class Hook(enum.Enum):
    COMPUTATION = "transform_traces_pre_prologue, the computation trace"
    PROLOGUE = "transform_traces_pre_prologue, the prologue trace"
    FUSION = "inplace_ex's fusion pass, before any other fusion pass"
    EXECUTION = "transform_trace_post_optimization, the execution trace"


class Role(enum.Enum):
    PASS = "a pass"
    DECIDES = "the checker: returns the trace and its decisions"
    ONLY_IF_DECIDED = "runs only where the checker decided writes"


@dataclass(frozen=True)
class Stage:
    hook: Hook
    run: Callable
    role: Role = Role.PASS

    @property
    def name(self) -> str:
        return self.run.__name__

    @property
    def module(self) -> str:
        """The stage's file, as the docs name it (``transforms/functionalize.py``)."""
        return self.run.__module__.removeprefix("thunder_ext.").replace(".", "/") + ".py"


PIPELINE: tuple[Stage, ...] = (
    # before any pass reads the trace: each reads a block program's call as a pure op
    Stage(Hook.COMPUTATION, inline_block_calls_sharing_written_state),
    # before anything reports a line: a trace of FX-generated code names the user's lines
    Stage(Hook.COMPUTATION, name_user_lines),
    Stage(Hook.PROLOGUE, guard_argument_containers),
    Stage(Hook.PROLOGUE, refuse_unrepresentable_aliased_arguments),
    Stage(Hook.PROLOGUE, refuse_arguments_sharing_written_state),
    Stage(Hook.PROLOGUE, refuse_differentiated_writes_into_arguments),
    Stage(Hook.COMPUTATION, trace_narrows_as_slices),
    Stage(Hook.COMPUTATION, scatter_writes_through_views),
    Stage(Hook.COMPUTATION, functionalize_writes),
    Stage(Hook.FUSION, give_zeros_their_prims),
    Stage(Hook.FUSION, name_lines_inside_writes),
    Stage(Hook.FUSION, clone_saved_values_before_writes),
    Stage(Hook.FUSION, keep_written_storage_aliased_as_traced),
    Stage(Hook.FUSION, pin_reads_of_overwritten_storage),
    Stage(Hook.FUSION, keep_uncomputed_writes_out_of_regions),
    # before the checker, which decides the writes of the regions that remain
    Stage(Hook.EXECUTION, run_regions_with_nothing_to_fuse_eagerly),
    Stage(Hook.EXECUTION, clone_saved_values_written_later),
    Stage(Hook.EXECUTION, prove_inplace_writes, Role.DECIDES),
    # only traces the extension rewrote: it answers for their memory, thunder for the rest
    Stage(Hook.EXECUTION, reuse_dead_buffers, Role.ONLY_IF_DECIDED),
)


def stages(*hooks: Hook) -> list[Stage]:
    """The stages run at ``hooks``, in the pipeline's order."""
    return [s for s in PIPELINE if s.hook in hooks]


inplace_ex.prepare_fusion_with([s.run for s in stages(Hook.FUSION)])
