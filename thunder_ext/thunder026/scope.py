"""Which compilations get the extension's changes to thunder: those whose transforms include an
``ExtensionTransform`` (``InplaceTransform`` is one). Stock ``thunder.jit`` in the same process keeps thunder's
behaviour wherever a change is scoped by ``compiling_with_extension``.

Retired by: nothing upstream; thunder has no per-compilation switch for its tables, so a scoped change asks
thunder's compile data which compilation is tracing.
"""

from __future__ import annotations

from thunder.core.compile_data import get_compile_data
from thunder.core.transforms import Transform


class ExtensionTransform(Transform):
    """A thunder ``Transform`` whose compilations get the extension's scoped changes to thunder."""


def extension_transform() -> ExtensionTransform | None:
    """The ``ExtensionTransform`` of the compilation thunder is tracing now, if it has one."""
    cd = get_compile_data()
    return None if cd is None else next((t for t in cd.transforms if isinstance(t, ExtensionTransform)), None)


def compiling_with_extension() -> bool:
    """Whether the compilation thunder is tracing now carries an ``ExtensionTransform``: the scope of every change
    ``adapt_thunder`` makes to what thunder already does."""
    return extension_transform() is not None
