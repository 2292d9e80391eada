"""Refuse aliased arguments that thunder would silently compute wrong.

When a function writes in place, thunder 0.2.6 traces arguments that share storage as one tensor:
each later argument of a group is replaced by the first one, reshaped to its shape. That is right when the two are the same view, or
both are contiguous from the same storage offset (``x`` and ``x.view(-1)``). Any other pair of equal size
(``x`` and ``x.t()``, ``x[0:2]`` and ``x[1:3]``) traces without complaint and gives wrong values, and a
later call with other views of the same shapes hits the same cache entry. An argument of another size
than the first (``x`` and ``x[0]``) is traced as itself (``thunder_ext.alias_updates``), which is
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

import torch
from thunder.core.prims import OpTags, PrimIDs
from thunder.core.pytree import tree_flatten
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

from thunder_ext.executors import inplace_ex
from thunder_ext.transforms.aliasing import thunder_inplace_write


class AliasedArgumentsError(RuntimeError):
    """Two arguments share storage in a way thunder cannot represent; nothing was run or written."""


def _layout(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)}, stride {t.stride()}, offset {t.storage_offset()}"


def _representable(first: torch.Tensor, other: torch.Tensor) -> bool:
    if first.numel() != other.numel():
        return True  # traced as itself, not as a reshape of ``first``
    if (first.shape, first.stride(), first.storage_offset()) == (other.shape, other.stride(), other.storage_offset()):
        return True
    return first.is_contiguous() and other.is_contiguous() and first.storage_offset() == other.storage_offset()


def _check_aliased_arguments(args, kwargs, computation_args, groups: str) -> None:
    flat, _ = tree_flatten((args, kwargs))
    for group in groups.split("-"):
        first, *others = positions = [int(i) for i in group.split(",")]
        members = {id(flat[i]) for i in positions}
        applied = [i for i in positions if i < len(computation_args)]
        holding = {j for j, a in enumerate(computation_args) if id(a) in members}
        misplaced = any(id(computation_args[i]) not in members for i in applied)  # a stranger made an alias
        unseen = len(holding) > 1 and not holding <= set(applied)  # aliases traced as unrelated tensors
        if misplaced or unseen:
            raise AliasedArgumentsError(
                f"thunder_ext.jit: arguments {', '.join(map(str, positions))} (flattened positions) share storage, "
                "and thunder 0.2.6 would apply that aliasing to the wrong arguments because the function does "
                "not use every argument, so nothing was run. Pass the tensor once."
            )
        for i in others:
            if not _representable(flat[first], flat[i]):
                raise AliasedArgumentsError(
                    f"thunder_ext.jit: arguments {first} and {i} (flattened positions) share storage as different "
                    f"views ({_layout(flat[first])}; {_layout(flat[i])}). thunder would compute with one as a "
                    "reshape of the other and give wrong values, so nothing was run. Pass the base tensor and "
                    "take the view inside the function."
                )


check_aliased_arguments = inplace_ex.register_operator(
    "check_aliased_arguments",
    meta=lambda args, kwargs, computation_args, groups: None,
    fn=_check_aliased_arguments,
    tags=(OpTags.DONT_DCE,),
)


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
