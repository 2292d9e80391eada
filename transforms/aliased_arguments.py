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

thunder's alias groups hold the call's arguments only: an argument that shares storage with a tensor the function
reaches some other way (``m(m.w)``: a module's parameter or buffer, a global, a closure's cell) is traced as a
tensor of its own, and the extension's passes order a write into it against its own readers only (``x.mul_(2);
return self.w.sum(0)`` summed ``w`` before the write). Second rule: where the computation writes in place, the
prologue checks on every call that no tensor of the call's arguments shares storage with such a tensor where
either is written; otherwise it raises ``AliasedArgumentsError``, naming the write, before anything runs. Refused,
not computed as eager would: that needs the trace to know the sharing, which thunder's cache key does not hold.

Two tensors reached that other way are traced apart too (a layer's buffer registered as a row of its root's:
``self.page.add_(y); self.pages.sum(0)`` summed the rows before the write, the PyTorch executor too). Third rule:
where the computation writes in place, the prologue checks on every call that no two of them share storage unless
the trace knows them as one storage, or neither is written; otherwise it raises ``AliasedArgumentsError``, naming
both and the write, before anything runs.
"""

from __future__ import annotations

from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

from thunder_ext.executors.checks import (
    AliasedArgumentsError,
    check_aliased_arguments,
    check_arguments_apart_from_state,
    check_state_apart,
)
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.block_calls import block_writes
from thunder_ext.transforms.op_kinds import source_line, thunder_inplace_write

__all__ = [
    "AliasedArgumentsError",
    "refuse_arguments_sharing_written_state",
    "refuse_unrepresentable_aliased_arguments",
]


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


def refuse_arguments_sharing_written_state(prologue_trace: TraceCtx, computation_trace: TraceCtx) -> TraceCtx:
    """Add the second rule's check to the prologue of a writing computation: which of its arguments come from the
    call's, which from elsewhere, and the first write into each one's storage."""
    bsyms = computation_trace.bound_symbols
    written = ((b, [w[1]] if (w := thunder_inplace_write(b)) else block_writes(b)) for b in bsyms)
    writes = [(b, targets) for b, targets in written if targets]
    if not writes:
        return prologue_trace
    aliases = Aliases(computation_trace.bound_symbols)
    first_writes = {}  # by the storage each writes (a block program's call writes several)
    for w, targets in writes:
        for target in targets:
            first_writes.setdefault(aliases.storage_key(target), w)
    described = {}
    for i, arg in enumerate(computation_trace.args):
        if isinstance(arg, TensorProxy) and (first := first_writes.get(aliases.storage_key(arg))) is not None:
            where = f" ({line})" if (line := source_line(first)) else ""
            described[i] = f"`{first.sym.name}` writes into `{arg.name}`{where}"
    *body, ret = prologue_trace.bound_symbols
    ((computation_args, _),) = ret.args  # the prologue returns (computation inputs, epilogue inputs)
    called = _from_the_call(prologue_trace)
    tensors = [i for i, a in enumerate(computation_args) if isinstance(a, TensorProxy)]
    own = tuple(i for i in tensors if computation_args[i].name in called)
    elsewhere = [i for i in tensors if i not in own]
    state = tuple(i for i in elsewhere if i in described or any(j in described for j in own))
    groups: dict = {}  # the trace's storage groups, numbered
    apart = tuple((i, groups.setdefault(aliases.storage_key(computation_trace.args[i]), len(groups)),
                   computation_trace.args[i].name) for i in elsewhere)  # fmt: skip
    checked = from_trace(prologue_trace)
    checks = []
    with tracectx(checked):
        if own and state:
            checks.append(check_arguments_apart_from_state.bind(computation_args, own, state, described, output=None))
        if len(groups) > 1 and any(i in described for i in elsewhere):
            checks.append(check_state_apart.bind(computation_args, apart, described, output=None))
    if not checks:
        return prologue_trace
    checked.bound_symbols = [*body, *checks, ret]  # after thunder's own checks
    checked.set_provenance(TraceProvenance("thunder_ext: refuse arguments sharing written state"))
    return checked


def _from_the_call(prologue_trace: TraceCtx) -> set[str]:
    """The names of what the prologue unpacks from the call's ``args`` and ``kwargs``."""
    called = {"args", "kwargs"}
    for bsym in prologue_trace.bound_symbols:
        if any(p.name in called for p in bsym.flat_proxy_args):
            called.update(p.name for p in bsym.flat_proxy_outs)
    return called
