"""The regional compiler's switches on a compilation's transform, and its hand-over of module calls."""

from __future__ import annotations

from typing import Any

from thunder_ext.regional import replay
from thunder_ext.regional.programs import ProgramStore
from thunder_ext.regional.report import TracedBlocks
from thunder_ext.thunder026.module_calls import ModuleCall
from thunder_ext.thunder026.scope import ExtensionTransform


class RegionalTransform(ExtensionTransform):
    """An ``ExtensionTransform`` whose compilations may trace each repeated block once and compile it once.

    ``replay_blocks``: the interpreter traces a repeated block once and replays its other calls (``replay``), which
    records the calls of each compilation in ``traced_blocks``. ``block_programs``: a replay calls the record's
    program (``programs``) where ``block_program_writes`` allows it, loaded from ``block_store`` (the compile
    cache's, where it is on) where stored there; None: unless thunder's torch.compile executor is among the
    compilation's (``programs.programs_wanted``)."""

    def __init__(self, *, replay_blocks: bool = True, block_programs: bool | None = None) -> None:
        self.replay_blocks = replay_blocks
        self.block_programs = block_programs
        self.traced_blocks: TracedBlocks | None = None  # of the compilation being traced, or the last one
        self.block_store: ProgramStore | None = None

    def trace_module_call(self, call: ModuleCall) -> Any:
        return replay.trace_module_call(self, call) if self.replay_blocks else call.interpret()

    def block_program_writes(self, bsyms: list, inputs: list, arguments: set, output: Any) -> frozenset[int] | str:
        """The positions among ``inputs`` whose storage a block's ``bsyms`` write, where a call of their program may
        stand for them in the model's trace; else why not. The rule is the transform's: none here."""
        return "no rule says where a call may stand for the block's ops"
