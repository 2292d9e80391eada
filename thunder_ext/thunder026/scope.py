"""Which compilations get the extension's changes to thunder: those whose transforms include an
``ExtensionTransform`` (``InplaceTransform`` is one). Stock ``thunder.jit`` in the same process keeps thunder's
behaviour wherever a change is scoped by ``compiling_with_extension``.

Retired by: nothing upstream; thunder has no per-compilation switch for its tables, so a scoped change asks
thunder's compile data which compilation is tracing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from thunder.core.compile_data import get_compile_data
from thunder.core.module import ThunderModule
from thunder.core.transforms import Transform

from thunder_ext.thunder026.compiled import note_members

if TYPE_CHECKING:
    from thunder_ext.thunder026.block_programs import ProgramStore
    from thunder_ext.thunder026.block_replay import TracedBlocks


class ExtensionTransform(Transform):
    """A thunder ``Transform`` whose compilations get the extension's scoped changes to thunder.

    ``replay_blocks``: the interpreter traces a repeated block once and replays its other calls
    (``block_replay``), which records the calls of each compilation in ``traced_blocks``. ``block_programs``: a
    replay calls the record's program (``block_programs``) where ``block_program_writes`` allows it, loaded from
    ``block_store`` (the compile cache's, where it is on) where stored there; None: unless thunder's torch.compile
    executor is among the compilation's (``block_replay.programs_wanted``)."""

    def __init__(self, *, replay_blocks: bool = True, block_programs: bool | None = None) -> None:
        self.replay_blocks = replay_blocks
        self.block_programs = block_programs
        self.traced_blocks: TracedBlocks | None = None  # of the compilation being traced, or the last one
        self.block_store: ProgramStore | None = None

    def transform_module(self, model: ThunderModule) -> None:
        note_members(model)  # as thunder makes the module: which of its snapshot's entries are the module's

    def block_program_writes(self, bsyms: list, inputs: list, module_tensors: set, output: Any) -> frozenset[int] | str:
        """The positions among ``inputs`` whose storage a block's ``bsyms`` write, where a call of their program may
        stand for them in the model's trace; else why not. The rule is the transform's: none here."""
        return "no rule says where a call may stand for the block's ops"


_FOUND = "_thunder_ext_transform"


def extension_transform() -> ExtensionTransform | None:
    """The ``ExtensionTransform`` of the compilation thunder is tracing now, if it has one (once found, kept on the
    compile data: the interpreter asks at every value it reads, and a transform once added stays)."""
    cd = get_compile_data()
    found = getattr(cd, _FOUND, None)
    if found is None:
        # thunder.dynamo's splitter checks each node under a CompileData made without ``transforms``
        transforms = getattr(cd, "transforms", None) or ()
        found = next((t for t in transforms if isinstance(t, ExtensionTransform)), None)
        if found is not None:
            setattr(cd, _FOUND, found)
    return found


def compiling_with_extension() -> bool:
    """Whether the compilation thunder is tracing now carries an ``ExtensionTransform``: the scope of every change
    ``adapt_thunder`` makes to what thunder already does."""
    return extension_transform() is not None
