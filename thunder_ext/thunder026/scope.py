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
    from thunder_ext.thunder026.module_calls import ModuleCall


class ExtensionTransform(Transform):
    """A thunder ``Transform`` whose compilations get the extension's scoped changes to thunder, and trace the
    module calls the interpreter hands them (``trace_module_call``)."""

    def transform_module(self, model: ThunderModule) -> None:
        note_members(model)  # as thunder makes the module: which of its snapshot's entries are the module's

    def trace_module_call(self, call: ModuleCall) -> Any:
        """The traced result of ``call``, a call of a module this compilation's interpreter reached: interpreted as
        thunder interprets it, here (``thunder_ext.regional.RegionalTransform`` traces repeated blocks once)."""
        return call.interpret()


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
