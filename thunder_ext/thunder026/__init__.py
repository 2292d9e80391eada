"""Everything the extension knows of lightning-thunder 0.2.6 beyond its public extension points.

The rest of the extension builds on thunder's public ones (``Transform``, ``OperatorExecutor``,
``FusionExecutor.register_supported``, ``thunder.Plugin``, ``thunder.jit(transforms=, executors=)``, trace
utilities); every private name of thunder's it reads, every table it changes and every rule of thunder's it
copies is in this package (``tests/test_architecture.py`` fails on a private thunder name outside it). Each module
says what it is for and what change upstream would retire it:

- ``adapt``: ``adapt_thunder()``, every change to thunder's globals, made once, when the extension's transform is
  first made (``WRITTEN_FOR`` is the one version it accepts);
- ``scope``: which compilations get the scoped changes (``ExtensionTransform``, ``compiling_with_extension``);
- ``module_calls``: each module call the interpreter reaches handed to the compilation's transform, and what an
  interpreted call did; ``trace_programs``: ops compiled as a program of their own and called as one op (both for
  ``thunder_ext/regional/``, which traces and compiles a repeated block once);
- ``constraints``: the interpreter's prologue checks kept and made without a quadratic scan;
- ``alias_updates``: thunder's ``insert_alias_updates`` for arguments that share storage at other sizes;
- ``tensor_asserts``: the interpreter's conditional jumps, wrapped to check an ``assert`` on a tensor;
- ``foreach``: the ``torch._foreach_*`` ops optimizers run;
- ``tables``: thunder's list of view ops, its ``_copy_``, the tag rematerialization respects;
- ``backward_split``: thunder's rule for which ops of a joint trace the backward runs;
- ``compiled``: what the extension reads or sets on ``ThunderModule`` and jitted functions;
- ``cache_entries``: thunder's cache entries as program texts and back, for the compile cache on disk.
"""

from thunder_ext.thunder026.adapt import WRITTEN_FOR, adapt_thunder, divert
from thunder_ext.thunder026.scope import ExtensionTransform, compiling_with_extension

__all__ = ["WRITTEN_FOR", "ExtensionTransform", "adapt_thunder", "compiling_with_extension", "divert"]
