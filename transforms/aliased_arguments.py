"""Refuse aliased arguments that thunder would silently compute wrong.

When a function writes in place, thunder 0.2.6 traces arguments that share storage as one tensor:
each later argument of a group is replaced by the first one, reshaped to its shape. That is right when the two are the same view, or
both are contiguous from the same storage offset (``x`` and ``x.view(-1)``). Any other pair of equal size
(``x`` and ``x.t()``, ``x[0:2]`` and ``x[1:3]``) traces without complaint and gives wrong values, and a
later call with other views of the same shapes hits the same cache entry. An argument of another size
than the first (``x`` and ``x[0]``) is traced as itself (``thunder_ext.thunder026.alias_updates``), which is
right whatever its layout.

It also counts positions among the call's arguments but applies them to the computation's, which
drops unused arguments: for ``f(x, x, y)`` whose body never reads its second parameter, ``y`` is
replaced by ``x``; for ``f(x, y, x)`` that never reads ``y``, the second ``x`` sits at position 1
of the computation, thunder looks for it at position 2, and the two are traced as unrelated tensors.

Rule: where the computation writes in place, a prologue that admits aliased arguments checks, on every call, that each aliased argument
is one of those three cases and that thunder's positions find the group among the computation's
arguments: each position it applies names a member, and where the computation holds more than one
member, its positions name them all; otherwise it raises ``AliasedArgumentsError`` before anything
runs.
Calls without aliased arguments get no check: thunder's cache key already tells them apart.
Read-only functions get none either: thunder leaves their aliased arguments as they are.
"""

from __future__ import annotations

from thunder.core.prims import PrimIDs
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

from thunder_ext.executors.torch_inplace import AliasedArgumentsError, check_aliased_arguments
from thunder_ext.transforms.aliasing import thunder_inplace_write

__all__ = ["AliasedArgumentsError", "refuse_unrepresentable_aliased_arguments"]



def refuse_unrepresentable_aliased_arguments(prologue_trace: TraceCtx, computation_trace: TraceCtx) -> TraceCtx:
    """Add the aliased-arguments check to the prologue of a writing computation that accepts them."""
    if not any(thunder_inplace_write(b) for b in computation_trace.bound_symbols):
        return prologue_trace
    # thunder's prologue pins the call's alias groups ("0,1-2,3": flattened argument positions) with
    # a string check on cache_info['alias_tensor_indices']; that check is what admits aliasing here.
    groups = next(
        (
            b.args[1]
            for b in prologue_trace.bound_symbols
            if b.sym.id == PrimIDs.CHECK_STRING_VALUE and b.args[0].name == "cache_info_alias_tensor_indices"
        ),
        "",
    )
    if not groups:
        return prologue_trace
    unpacked = {b.output.name: b.output for b in prologue_trace.bound_symbols if b.sym.id == PrimIDs.UNPACK_TRIVIAL}
    *body, ret = prologue_trace.bound_symbols
    ((computation_args, _),) = ret.args  # the prologue returns (computation inputs, epilogue inputs)
    checked = from_trace(prologue_trace)
    with tracectx(checked):
        check = check_aliased_arguments.bind(
            unpacked["args"], unpacked["kwargs"], computation_args, groups, output=None
        )
    checked.bound_symbols = [*body, check, ret]  # after thunder's own checks
    checked.set_provenance(TraceProvenance("refuse unrepresentable aliased arguments"))
    return checked
