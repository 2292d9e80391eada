"""What thunder's autodiff differentiates, decided in one place for every stage that asks.

A write traced under ``torch.no_grad()`` or ``torch.inference_mode()`` is constant for thunder's VJP (its result
carries ``ProxyTag.DETACHED_AUTOGRAD_GRAPH``). Any other write into storage that an argument requiring grad
shares is differentiated by thunder, which the extension leaves to thunder: functionalization keeps it as
thunder's op (``functionalize`` rule 5), the prologue refuses it into a leaf (``leaf_writes``), and the checker
reports thunder's copy as thunder's (``prove_inplace``). A write into an intermediate's storage that a view
makes observable (a write through a view, a view made before the write) is decided by
``view_writes.scattered_storages``: scattered into its base before autodiff, or refused; the two sets are
disjoint (an argument's storage, an intermediate's), and every other differentiated write is a ``copy_to_out_``
with its gradient rule.
"""

from __future__ import annotations

from thunder.core.proxies import ProxyTag, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.transforms.aliasing import Aliases, tensor_args, tensor_outs, thunder_inplace_write


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


def storages_carrying_grad(trace: TraceCtx, aliases: Aliases) -> set[str]:
    """The storages that hold, at some point of ``trace``, a value thunder differentiates: those of the arguments
    requiring grad, and each that an op traced with grad makes, views or writes from one of them. A storage counts
    from its first such value on, for the whole trace: more than exact, never less."""
    carrying = grad_storages(trace, aliases)
    for bsym in trace.bound_symbols:
        if not traced_without_grad(bsym) and any(aliases.storage_key(t) in carrying for t in tensor_args(bsym)):
            carrying.update(aliases.storage_key(t) for t in tensor_outs(bsym))
    return carrying


def left_to_thunder(bsym: BoundSymbol, target: TensorProxy, aliases: Aliases, grad_storages: set[str]) -> bool:
    """Whether ``bsym``, a write into ``target``, is one thunder differentiates into storage of an argument that
    requires grad (``grad_storages``), which the extension leaves to thunder."""
    return not traced_without_grad(bsym) and aliases.storage_key(target) in grad_storages


def differentiated_writes_left_to_thunder(trace: TraceCtx, aliases: Aliases) -> list[BoundSymbol]:
    """The in-place ops of ``trace`` (``aliases`` relates its tensors) that are left to thunder."""
    storages = grad_storages(trace, aliases)
    return [
        b
        for b in trace.bound_symbols
        if (write := thunder_inplace_write(b)) is not None and left_to_thunder(b, write[1], aliases, storages)
    ]
