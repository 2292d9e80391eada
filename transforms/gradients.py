"""What thunder's autodiff differentiates, decided in one place for every stage that asks.

A write traced under ``torch.no_grad()`` or ``torch.inference_mode()`` is constant for thunder's VJP (its result
carries ``ProxyTag.DETACHED_AUTOGRAD_GRAPH``); a write that reads a differentiated value (the one written, or
the old one of a storage that holds one) writes one (``writes_of_differentiated_values``). Each differentiated
write takes one of three forms:

- into storage that an argument requiring grad shares: thunder's own (``left_to_thunder``): functionalization
  keeps it as thunder's op (``functionalize`` rule 5), the prologue refuses the call (``grad_argument_writes``), and
  the checker reports thunder's copy as thunder's (``prove_inplace``, asking ``grad_argument_sharing``);
- into a storage whose writes thunder's form would differentiate wrongly (an intermediate's that a view makes
  observable, an argument's requiring no grad (``written_by_autodiff_as_traced`` false) read past its last
  write through another of its tensors, or written or read through ``diagonal``): scattered into its base before
  autodiff, or refused (``view_writes.scattered_storages``, which asks this module what is differentiated);
- any other: a ``copy_to_out_`` with its gradient rule.

The first two sets of storages are disjoint. A write that overwrites a differentiated value keeps that value's
history at zero gradient (``overwrites_of_differentiated_values``), in either of the last two forms.
"""

from __future__ import annotations

from collections.abc import Iterator

from thunder.core.proxies import ProxyTag, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.op_kinds import functional_reads, tensor_args, tensor_outs, thunder_inplace_write


def traced_without_grad(bsym: BoundSymbol) -> bool:
    """Whether thunder traced ``bsym`` with grad disabled, which makes it constant for its VJP."""
    return any(ProxyTag.DETACHED_AUTOGRAD_GRAPH in o.tags for o in tensor_outs(bsym))


def cuts_the_gradient(bsym: BoundSymbol, computed: TensorProxy) -> bool:
    """Whether ``bsym``, traced without grad, writes a value that thunder differentiates (rule 5)."""
    return traced_without_grad(bsym) and ProxyTag.DETACHED_AUTOGRAD_GRAPH not in computed.tags


def arguments_requiring_grad(trace: TraceCtx) -> list[TensorProxy]:
    return [a for a in trace.args if isinstance(a, TensorProxy) and a.requires_grad]


def grad_storages(trace: TraceCtx, aliases: Aliases) -> set[str]:
    """The storages (``Aliases.storage_key``) that an argument requiring grad lives in."""
    return {aliases.storage_key(a) for a in arguments_requiring_grad(trace)}


def _differentiated_ops(trace: TraceCtx, aliases: Aliases) -> Iterator[tuple[int, BoundSymbol, set[str], bool]]:
    """Each op of ``trace`` that thunder differentiates, by position, with the storages that hold a differentiated
    value before it and whether it reads one (then its results' storages hold one after it)."""
    carrying = grad_storages(trace, aliases)
    if not carrying:  # nothing differentiated: no cost to a trace without grad
        return
    for index, bsym in enumerate(trace.bound_symbols):
        if traced_without_grad(bsym):
            continue
        reads = any(aliases.storage_key(t) in carrying for t in tensor_args(bsym))
        yield index, bsym, carrying, reads
        if reads:
            carrying.update(aliases.storage_key(t) for t in tensor_outs(bsym))


def overwrites_of_differentiated_values(trace: TraceCtx, aliases: Aliases) -> set[int]:
    """The positions in ``trace`` of the writes thunder differentiates whose new value reads nothing of the old one
    (``x.copy_(y)``), into a tensor whose old value is differentiated there. Eager's graph keeps that old value's
    history behind such a write, with a zero gradient (``a.grad`` zeros for ``x = a * 2; x.copy_(y)``, and ``x``
    requiring grad even where ``y`` does not); thunder's functional form drops it (``a.grad`` None)."""
    overwrites = set()
    for index, bsym, carrying, _ in _differentiated_ops(trace, aliases):
        write = thunder_inplace_write(bsym)
        # ``zero_``'s ``zeros_like(x)`` reads x's shape, not its data
        if (
            write is not None
            and aliases.storage_key(write[1]) in carrying
            and not functional_reads(bsym).intersection(aliases.sharing_storage(write[1]))
        ):
            overwrites.add(index)
    return overwrites


def writes_of_differentiated_values(trace: TraceCtx, aliases: Aliases) -> set[int]:
    """The positions in ``trace`` of the writes whose new value thunder differentiates: they read a differentiated
    value (the one written, or the old one of a storage that holds one)."""
    return {
        index for index, bsym, _, reads in _differentiated_ops(trace, aliases) if reads and thunder_inplace_write(bsym)
    }


def left_to_thunder(bsym: BoundSymbol, target: TensorProxy, aliases: Aliases, grad_storages: set[str]) -> bool:
    """Whether ``bsym``, a write into ``target``, is one thunder differentiates into storage of an argument that
    requires grad (``grad_storages``), which the extension leaves to thunder."""
    return not traced_without_grad(bsym) and aliases.storage_key(target) in grad_storages


def grad_argument_sharing(target: TensorProxy, aliases: Aliases, grad_args: list[TensorProxy]) -> TensorProxy | None:
    """The first of ``grad_args`` (arguments requiring grad) that shares ``target``'s storage, if any: the checker
    leaves thunder's own copy into it to thunder, as ``left_to_thunder`` leaves the write. It asks the aliases
    of the trace as they stand, which the checker's rewrites extend, so keys taken before would not do."""
    return next((a for a in grad_args if aliases.same_storage(a, target)), None)


def written_by_autodiff_as_traced(arguments: list[TensorProxy]) -> bool:
    """Whether thunder's autodiff differentiates the writes into the storage of ``arguments`` (the arguments that
    share one storage) as they are traced: the one argument requires grad (``left_to_thunder``), or several share
    it (the prologue's stages refuse what they cannot represent). ``view_writes`` scatters no other argument's."""
    return len(arguments) != 1 or arguments[0].requires_grad


def differentiated_writes_left_to_thunder(trace: TraceCtx, aliases: Aliases) -> list[BoundSymbol]:
    """The in-place ops of ``trace`` (``aliases`` relates its tensors) that are left to thunder."""
    storages = grad_storages(trace, aliases)
    return [
        b
        for b in trace.bound_symbols
        if (write := thunder_inplace_write(b)) is not None and left_to_thunder(b, write[1], aliases, storages)
    ]
