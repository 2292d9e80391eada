"""Writes through views that thunder or Inductor would get wrong, scattered into their base before autodiff.

Rule: in a trace that thunder differentiates (an argument requires grad), the storage of an intermediate that
a differentiated write reaches through a view (``x = a * 2; x[0:1].mul_(y)``), or that has a view made before
such a write (``v = x[0:2]; x.mul_(y); return v``), holds one functional value of its base: a write into the
base is that value, a write into a view ``v = c(x)`` (``c`` a chain of view ops) scatters its new value into it,
``x' = x.flatten().index_copy_(0, c(arange).flatten(), new.flatten())`` (``scatter_into_view_``), and every
read of the base or of any view of it reads that view of the latest value, made anew where it is read (``narrow``
as the slice it is). The storage's writes through views, its views and renames are gone: what thunder's autodiff
sees is writes of the whole base, each read from the value it makes, and the gradient is the chain rule through
the scatter (``c`` of the base's cotangent sent to the written view's new value, zeros where the old one was
overwritten: ``transforms/view_scatter.py``), which thunder's ``update_aliases`` otherwise passes straight
through, silently wrong. Functionalization makes each scatter a ``copy_to_out_`` that the checker decides as any
other write (in place, the tensors autodiff saves of the old value cloned first); an argument's base is scattered
into a new tensor instead, its final value written back once, at the end.

``c(arange)``, the chain applied to the base's element numbers, holds the base element each element of the
view is, whatever the view ops (slices, ``select``, ``diagonal``, ``transpose``, ``view``...): view ops are
functions of a tensor's logical order. It is a constant of the shapes and the chain, computed once by
``view_positions``, an op no fusion takes (Inductor spent minutes simplifying the index arithmetic of a traced
one).

Refused before anything runs, naming the op, the chain and the line (``ViewWriteGradientError``):
- where the index would not be exact: ``as_strided`` in the chain (its strides are the storage's, not the
  logical order's), a view that changes the dtype;
- where eager's graph ignores a write that the scattered base would not: a chain through ``detach``, a write
  into the storage traced without grad;
- where eager refuses the write itself: through an ``expand`` that makes elements share memory, into one of
  several views an op returns (``split``, ``chunk``, ``unbind``).

The storage of an argument that requires no grad is scattered too where thunder's own form of its writes loses a
gradient: where it is written through ``diagonal``, which thunder's autodiff makes a copy (thunder's form filled the
copy: the write was lost), and where, once a differentiated value is written into it, a tensor of it is read that
the last write does not make (a view taken before the write, the base after a write through a view: thunder
renames it with ``update_aliases``, whose gradient passes its old value's), and where a ``diagonal`` view of it,
which thunder's autodiff makes a copy, is read past a write of it (the copy holds the old value, whatever the
gradient). Its final value is then written back into it. Reads of the written tensor and of views made of it
after the write (a KV cache written in a forward with grad) leave the storage as traced, its writes in place.

In any trace, differentiated or not, compiled with thunder's torch.compile executor, the storage of an intermediate
written through a chain of two or more views with a ``diagonal`` among them is scattered too: torch 2.9.1's
torch.compile may return such a view of a tensor its graph makes as a tensor of its own, so where that executor
makes the chain in a region and the write runs after it, the write was lost (``_returned_apart_by_inductor``).
Where the chain's index cannot be computed, it is left as traced. Without that executor the write is left as traced
too: no region there returns the view apart, and on an H100 nvFuser computed a program scattered so wrong
(docs/gpu.md, runs 9 and 10).

Left as they are: a chain through a tensor-indexed ``getitem`` (a copy in eager, no view), a storage of an
integer dtype in a differentiated trace (no gradient), every other argument's storage (``functionalize`` rule 5).

Only such storages change, so a trace without such a write is returned as it came.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import thunder.torch as ltorch
from thunder.core import dtypes
from thunder.core.compile_data import get_compile_data
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace
from thunder.executors.torch_compile import TorchCompileExecutor

from thunder_ext.executors.torch_inplace import ViewSteps
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.gradients import (
    arguments_requiring_grad,
    overwrites_of_differentiated_values,
    traced_without_grad,
    writes_of_differentiated_values,
    written_by_autodiff_as_traced,
)
from thunder_ext.transforms.op_kinds import (
    functional_reads,
    is_update_aliases,
    is_view_op,
    located_at,
    source_line,
    tensor_args,
    tensor_outs,
    thunder_inplace_write,
    thunder_op_id,
)
from thunder_ext.transforms.traced import as_written_into, keeping_history, traced_ops
from thunder_ext.transforms.view_scatter import scatter_into_view, scatter_into_view_, view_of


class ViewWriteGradientError(RuntimeError):
    """A differentiated write through a view whose gradient the extension cannot compute exactly."""


ViewStep = tuple[BoundSymbol, int]  # a view op and which of its results (``split`` has several)
_INEXACT_VIEWS = {ltorch.as_strided.id: "its strides address the storage, not the tensor's elements"}
_NO_GRADIENT_VIEWS = {ltorch.detach.id}
_IDENTITY_VIEWS = {ltorch.to.id}  # a view only where it changes nothing (``op_kinds.is_view_op``)
_OVERLAPPING_VIEWS = {ltorch.expand.id, ltorch.expand_as.id}


def _is_diagonal(bsym: BoundSymbol) -> bool:
    """A ``diagonal``: the view thunder's autodiff decomposes into a copy (permute, reshape, ``take``), and one that
    torch.compile may return apart from its base behind another view (``_returned_apart_by_inductor``)."""
    return thunder_op_id(bsym) == ltorch.diagonal.id


def _makes_a_view(bsym: BoundSymbol) -> bool:
    """A view op (not a rename, not a write) of a tensor."""
    view = is_view_op(bsym) and not is_update_aliases(bsym) and thunder_inplace_write(bsym) is None
    return view and bool(tensor_args(bsym))


def _view_chains(trace: TraceCtx, aliases: Aliases) -> dict[str, tuple[ViewStep, ...]]:
    """Each view's chain of view ops from the tensor that owns its storage, by ``Aliases.tensor_key``."""
    chains: dict[str, tuple[ViewStep, ...]] = {}
    for bsym in filter(_makes_a_view, trace.bound_symbols):
        args = tensor_args(bsym)
        chain = chains.get(aliases.tensor_key(args[0]), ())
        for k, out in enumerate(tensor_outs(bsym)):
            chains[aliases.tensor_key(out)] = (*chain, (bsym, k))
    return chains


def _describe(chain: tuple[ViewStep, ...]) -> str:
    if not chain:
        return "into the base"
    return "through the view chain `" + ".".join(f"{bsym.sym.name}()" for bsym, _ in chain) + "`"


def _indexes_a_copy(bsym: BoundSymbol) -> bool:
    """A ``getitem`` with a tensor among its indices: advanced indexing, which copies in eager."""
    return thunder_op_id(bsym) == ltorch.getitem.id and len(tensor_args(bsym)) > 1


_NO_GRAD_WRITE = (
    "it runs under no_grad into storage that a differentiated write reaches through a view, and eager's graph "
    "ignores it (the scattered base would not)"
)


def _refusal(chain: tuple[ViewStep, ...]) -> str | None:
    """Why the gradient of a write through ``chain`` cannot be computed exactly; None if it can."""
    for bsym, k in chain:
        op = thunder_op_id(bsym)
        (arg, *_), out = tensor_args(bsym), tensor_outs(bsym)[k]
        if op in _INEXACT_VIEWS:
            return f"`{bsym.sym.name}`: {_INEXACT_VIEWS[op]}"
        if op in _NO_GRADIENT_VIEWS:
            return f"`{bsym.sym.name}`: eager's graph ignores a write through it"
        if out.dtype != arg.dtype:
            return f"`{bsym.sym.name}` views {dtypes.to_str(arg.dtype)} as {dtypes.to_str(out.dtype)}"
        if op in _OVERLAPPING_VIEWS and math.prod(out.shape) > math.prod(arg.shape):
            return f"`{bsym.sym.name}` makes elements share memory, which eager refuses to write"
        if len(tensor_outs(bsym)) > 1:
            return f"`{bsym.sym.name}` returns several views, and eager refuses a write into one of them"
    return None


def _argument_storages(trace: TraceCtx, aliases: Aliases) -> dict[str, list[TensorProxy]]:
    """The arguments of ``trace`` by storage (``Aliases.storage_key``)."""
    flat_args, _ = tree_flatten((trace.args, trace.kwargs))
    storages: dict[str, list[TensorProxy]] = {}
    for a in flat_args:
        if isinstance(a, TensorProxy):
            storages.setdefault(aliases.storage_key(a), []).append(a)
    return storages


def _write_lost_by_autodiff(through_views: list) -> bool:
    """Whether a differentiated write reaches an argument through a view that thunder's autodiff makes a copy of,
    which thunder's own form of the write would fill instead."""
    return any(_is_diagonal(b) for _, chain in through_views for b, _ in chain)


def _differentiated_reads(bsym: BoundSymbol) -> list[TensorProxy]:
    """The tensors ``bsym`` reads that a gradient may flow from: of a module's return, its outputs, not the
    arguments thunder returns beside them for the epilogue (``flat_args``, which its autodiff does not
    differentiate)."""
    if bsym.sym.id == PrimIDs.RETURN and isinstance(ret := bsym.args[0], dict) and "output" in ret:
        return [t for t in tree_flatten(ret["output"])[0] if isinstance(t, TensorProxy)]
    return tensor_args(bsym)


def _read_stale_after_a_differentiated_write(
    trace: TraceCtx, aliases: Aliases, storage: str, differentiated: set[int]
) -> bool:
    """Whether, once a differentiated value is written into ``storage``, a tensor of it is read that thunder's
    functional form of the writes does not derive from the last write: any but the written tensor (renamed) and
    views made of it after the write. thunder renames such a tensor with ``update_aliases``, whose gradient passes
    its cotangent to its old value, past the write (``v = buf.unsqueeze(1); buf.index_copy_(0, i, a * 2); v * 3``:
    ``a``'s gradient misses ``v``'s read; a write through ``v``, then a read of ``buf``, alike)."""
    fresh: set[str] | None = None  # the tensors the last write is read through; None before a differentiated one
    for index, bsym in enumerate(trace.bound_symbols):
        ours = [t for t in _differentiated_reads(bsym) if aliases.storage_key(t) == storage]
        if not ours or is_update_aliases(bsym):
            continue
        if _makes_a_view(bsym):
            if fresh is not None and aliases.tensor_key(ours[0]) in fresh:
                fresh.update(aliases.tensor_key(t) for t in tensor_outs(bsym))
            continue
        write = thunder_inplace_write(bsym)
        target = write[1] if write is not None and aliases.storage_key(write[1]) == storage else None
        # a write reads its target where it computes from the old value (``mul_``), not its shape alone (``fill_``)
        read = [t for t in ours if target is None or t.name != target.name or t.name in functional_reads(bsym)]
        if fresh is not None and any(aliases.tensor_key(t) not in fresh for t in read):
            return True
        if target is not None and (fresh is not None or index in differentiated):
            fresh = {aliases.tensor_key(target)}
    return False


def _copied_view_read_past_a_write(
    trace: TraceCtx, aliases: Aliases, storage: str, chains: dict[str, tuple[ViewStep, ...]]
) -> bool:
    """Whether a view of ``storage`` that thunder's autodiff makes a copy of (through ``diagonal``), made before a
    write of it, or a view of such a view, is read after that write: thunder's autodiff decomposes every
    ``diagonal`` of a trace it differentiates into a ``take``, so the copy holds the old value, silently
    (``v = buf.diagonal(); buf.add_(-2.0); v * a``, ``a`` requiring grad: ``buf``'s old diagonal; the fuzzer's
    ``requires_grad/found_bb7c78842b73``)."""
    copied: set[str] = set()  # tensor keys of such views, made so far
    stale: set[str] = set()  # of those, the ones made before a write since, and views of them
    for bsym in trace.bound_symbols:
        ours = [t for t in tensor_args(bsym) if aliases.storage_key(t) == storage]
        if not ours or is_update_aliases(bsym):
            continue
        if _makes_a_view(bsym):
            outs = {aliases.tensor_key(t) for t in tensor_outs(bsym)}
            copied |= {k for k in outs if any(_is_diagonal(b) for b, _ in chains.get(k, ()))}
            if aliases.tensor_key(ours[0]) in stale:
                stale |= outs
            continue
        if any(aliases.tensor_key(t) in stale for t in ours):
            return True
        if (write := thunder_inplace_write(bsym)) is not None and aliases.storage_key(write[1]) == storage:
            stale |= copied
    return False


def _returned_apart_by_inductor(chain: tuple[ViewStep, ...]) -> bool:
    """Whether torch 2.9.1's torch.compile may return ``chain``'s view of a tensor its graph makes as a tensor of its
    own, which a write after the graph does not reach: a chain of two or more views with a ``diagonal`` among them.

    Which such chains come back apart depends on the layout Inductor gives the tensor: ``r.unsqueeze(0).diagonal()``
    is a view of ``r = a * 2`` and a tensor of its own of ``r = a.t() * 2`` (the fuzzer's ``requires_grad/
    found_7e9cf5749b8a``, ``found_6925ffcdff2c``). Of 600 chains of one or two views of six layouts of an
    intermediate (``scripts/probe_inductor_view_outputs.py``), every one returned apart where eager returns a view
    had two views or more, one a ``diagonal`` or an ``unfold`` (which thunder does not trace); views of the graph's
    inputs always come back views. On CUDA (Triton, torch 2.11, GPU run 9) the same probe found a subset of those."""
    return len(chain) > 1 and any(_is_diagonal(b) for b, _ in chain)


def _inductor_may_make_diagonals() -> bool:
    """Whether a torch.compile region of the compilation being traced may make a chain of views with a ``diagonal``:
    one of its executors is a ``TorchCompileExecutor`` that runs ``diagonal`` (thunder's torch.compile executor; the
    ``torchcompile_cat`` and ``torchcompile_xentropy`` of thunder's defaults run a few other ops only). Outside a
    compilation, as if one may."""
    compile_data = get_compile_data()
    if compile_data is None:
        return True
    return any(
        isinstance(e, TorchCompileExecutor) and ltorch.diagonal.id in e.implmap for e in compile_data.executors_list
    )


def scattered_storages(trace: TraceCtx, aliases: Aliases, chains: dict[str, tuple[ViewStep, ...]]) -> set[str]:
    """The storages (``Aliases.storage_key``) to scatter in ``trace``: where thunder differentiates it, those of
    intermediates that a differentiated write reaches through a view, or that have a view made before such a write,
    and those of arguments requiring no grad that thunder's form of their writes would differentiate wrongly or
    read stale (``_value_lost``); in any trace thunder's torch.compile executor compiles, those of intermediates
    written through a view that torch.compile may return apart from them.

    Raises ``ViewWriteGradientError`` for a differentiated write whose chain the rule refuses."""
    arguments = _argument_storages(trace, aliases)
    differentiated = writes_of_differentiated_values(trace, aliases) if arguments_requiring_grad(trace) else None
    written: dict[str, list[tuple[BoundSymbol, TensorProxy, tuple[ViewStep, ...]]]] = {}
    first_view: dict[str, int] = {}  # where each storage's first view is made
    last_write: dict[str, int] = {}  # where its last differentiated write is
    for index, bsym in enumerate(trace.bound_symbols):
        if (write := thunder_inplace_write(bsym)) is not None:
            target = write[1]
            chain = chains.get(aliases.tensor_key(target), ())
            written.setdefault(aliases.storage_key(target), []).append((bsym, target, chain))
            if not traced_without_grad(bsym):
                last_write[aliases.storage_key(target)] = index
        elif _makes_a_view(bsym):
            first_view.setdefault(aliases.storage_key(tensor_args(bsym)[0]), index)
    scattered = set()
    for storage, writes in written.items():
        if any(_indexes_a_copy(b) for *_, c in writes for b, _ in c):
            continue  # no view to write through
        through_views = [(w, c) for w, _, c in writes if c and not traced_without_grad(w)]
        # a view made before a write of the base reads the new value through thunder's renames too
        viewed_before = first_view.get(storage, len(trace.bound_symbols)) < last_write.get(storage, -1)
        if differentiated is None or not dtypes.is_inexact_dtype(writes[0][1].dtype):
            for_its_gradient = False
        elif storage in arguments:
            for_its_gradient = not written_by_autodiff_as_traced(arguments[storage]) and (
                _write_lost_by_autodiff(through_views)
                or _read_stale_after_a_differentiated_write(trace, aliases, storage, differentiated)
            )
        else:
            for_its_gradient = bool(through_views or viewed_before)
        if for_its_gradient:
            _refuse_inexact_gradients(through_views, [(w, c) for w, _, c in writes if traced_without_grad(w)])
            scattered.add(storage)
        elif (
            _value_lost(trace, aliases, storage, chains, writes, arguments, differentiated)
            and not any(_refusal(c) for *_, c in writes)  # a chain whose index cannot be computed stays as traced
        ):
            scattered.add(storage)
    return scattered


def _value_lost(
    trace: TraceCtx,
    aliases: Aliases,
    storage: str,
    chains: dict[str, tuple[ViewStep, ...]],
    writes: list,
    arguments: dict[str, list[TensorProxy]],
    differentiated: set[int] | None,
) -> bool:
    """Whether a value read of ``storage`` (``writes`` its writes) would be wrong as traced, whatever its gradient:
    an intermediate's written through a view that torch.compile returns apart from it, or, where thunder
    differentiates the trace, an argument's (one, requiring no grad) read through a copy autodiff makes of a view."""
    if storage not in arguments:
        return _inductor_may_make_diagonals() and any(_returned_apart_by_inductor(c) for *_, c in writes)
    return (
        differentiated is not None
        and not written_by_autodiff_as_traced(arguments[storage])
        and _copied_view_read_past_a_write(trace, aliases, storage, chains)
    )


def _refuse_inexact_gradients(through_views: list, without_grad: list) -> None:
    """Raise ``ViewWriteGradientError`` for the first write into a storage scattered for its gradient whose
    gradient the rule cannot compute exactly."""
    refused = [(w, c, _refusal(c)) for w, c in through_views] + [(w, c, _NO_GRAD_WRITE) for w, c in without_grad]
    for w, chain, why in refused:
        if why is not None:
            where = f" at {line}" if (line := source_line(w)) else ""
            raise ViewWriteGradientError(
                f"thunder_ext: `{w.sym.name}` writes {_describe(chain)}{where} "
                f"in a function that is differentiated, and its gradient cannot be computed exactly: {why}. "
                "Write into a clone, or compute the new value out of place."
            )


def _apply(chain: tuple[ViewStep, ...], t: TensorProxy) -> TensorProxy:
    """``chain``'s view ops, traced anew on ``t`` (each op's first argument), as ``view_of`` takes them."""

    def step(bsym: BoundSymbol, k: int) -> tuple:
        if thunder_op_id(bsym) == ltorch.narrow.id:
            return "narrow", tuple(bsym.args[1:4]), ()

        def view(x: TensorProxy, *args: Any, **kwargs: Any) -> TensorProxy:
            result = bsym.sym(x, *args, **kwargs)
            return result[k] if isinstance(result, (tuple, list)) else result

        return view, tuple(bsym.args[1:]), tuple(bsym.kwargs.items())

    shape = tuple(tensor_outs(chain[-1][0])[chain[-1][1]].shape) if chain else tuple(t.shape)
    return view_of(t, [step(b, k) for b, k in chain], shape)


def _steps(chain: tuple[ViewStep, ...]) -> ViewSteps:
    """``chain`` as ``view_positions`` takes it: each op's ``torch.Tensor`` method and its arguments after the
    tensor (``x.view_as(y)`` as ``x.view(y.shape)``), but those that view a tensor as itself."""
    steps = []
    for bsym, _ in chain:
        if thunder_op_id(bsym) in _IDENTITY_VIEWS:
            continue
        name, args = bsym.sym.name, bsym.args[1:]
        if name.endswith("_as"):  # the other tensor gives a shape only
            name, args = name.removesuffix("_as"), (args[0].shape,)
        steps.append((name, tuple(args), tuple(bsym.kwargs.items())))
    return tuple(steps)


def _scatter(base: TensorProxy, chain: tuple[ViewStep, ...], value: TensorProxy, *, in_place: bool) -> TensorProxy:
    """``base`` with ``chain(base)`` replaced by ``value``, as one ``scatter_into_view`` of its flattened elements:
    in place if ``in_place`` (functionalization makes it a write into all of ``base``, which the checker decides as
    any other), else into a new tensor."""
    flat = ltorch.reshape(base, (math.prod(base.shape),))
    scatter = scatter_into_view_ if in_place else scatter_into_view
    return ltorch.reshape(scatter(flat, value, tuple(base.shape), _steps(chain)), base.shape)


@dataclass
class _Scatterer:
    trace: TraceCtx  # the trace being built
    aliases: Aliases
    chains: dict[str, tuple[ViewStep, ...]]
    scattered: set[str]  # the storages the rule rewrites
    arguments: dict[str, TensorProxy]  # the argument of each rewritten argument storage, written back at the end
    overwrites: set[int]  # the writes that keep the history of the value they overwrite
    base: dict[str, TensorProxy] = field(default_factory=dict)  # each rewritten storage's latest base value
    views: dict[str, dict[str, TensorProxy]] = field(default_factory=dict)  # its tensors' views of that value
    out: list[BoundSymbol] = field(default_factory=list)

    def written(self, t: Proxy) -> bool:
        """Whether ``t`` lives in a rewritten storage: it reads a view of the base's latest value."""
        return isinstance(t, TensorProxy) and self.aliases.storage_key(t) in self.base

    def value(self, t: TensorProxy) -> TensorProxy:
        """``t``'s value now: its chain applied to its storage's latest base value."""
        key, storage = self.aliases.tensor_key(t), self.aliases.storage_key(t)
        views = self.views[storage]
        if key not in views:
            views[key] = self.traced(lambda: _apply(self.chains.get(key, ()), self.base[storage]))
        return views[key]

    def traced(self, op: Callable[[], Any]) -> Any:
        result, bsyms = traced_ops(self.trace, op)
        self.out += bsyms
        return result

    def swapped(self, bsym: BoundSymbol) -> BoundSymbol:
        """``bsym`` reading each tensor of a written storage at its value now."""
        swap = {variableify(t): self.value(t) for t in tensor_args(bsym) if self.written(t)}
        return bsym.from_bsym_swap_proxies(swap, skip_output=True) if swap else bsym

    def write(self, index: int, bsym: BoundSymbol, computed: TensorProxy, target: TensorProxy) -> None:
        """The new value of ``target`` (``bsym``'s functional part), made its storage's base value."""
        for functional_part in bsym.subsymbols[:-1]:
            self.out.append(located_at(self.swapped(functional_part), bsym))
        if self.written(computed):
            computed = self.value(computed)
        storage, old, chain = (
            self.aliases.storage_key(target),
            self.value(target),
            self.chains.get(self.aliases.tensor_key(target), ()),
        )

        def scatter() -> TensorProxy:
            new = as_written_into(computed, old)
            if chain:  # an argument's base is written once, at the end (``write_back``)
                return _scatter(self.base[storage], chain, new, in_place=storage not in self.arguments)
            # the base overwritten (``x.copy_(y)``): eager's graph keeps the old value's history (zero gradient)
            return keeping_history(new, old) if index in self.overwrites else new

        start = len(self.out)
        self.base[storage] = self.traced(scatter)
        self.out[start:] = [located_at(b, bsym) for b in self.out[start:]]
        self.views[storage] = {}

    def rename(self, bsym: BoundSymbol) -> None:
        """thunder's ``update_aliases`` without the tensors of written storages, which read the base's value."""
        kept = [(a, o) for a, o in zip(tensor_args(bsym), tensor_outs(bsym)) if not self.written(a)]
        if len(kept) == len(tensor_outs(bsym)):
            self.out.append(bsym)
        elif bsym.sym.id != PrimIDs.UPDATE_ALIASES:  # the extension's renames name arguments and indices only
            self.out.append(self.swapped(bsym))
        elif kept:
            args, outs = zip(*kept)
            self.out.append(bsym.from_bsym(args=(tuple(args),), output=tuple(outs)))

    def write_back(self) -> None:
        """Each rewritten argument's final value copied into it, its views read from it again."""
        for storage, argument in self.arguments.items():
            if self.base[storage] is not argument:
                self.base[storage] = self.traced(lambda a=argument, final=self.base[storage]: ltorch.copy_(a, final))
                self.views[storage] = {}

    def run(self, bsyms: list[BoundSymbol]) -> list[BoundSymbol]:
        for storage, argument in self.arguments.items():
            self.base[storage], self.views[storage] = argument, {}
        for index, bsym in enumerate(bsyms):
            if bsym.sym.id == PrimIDs.RETURN:
                self.write_back()
            write = thunder_inplace_write(bsym)
            if write is not None and self.aliases.storage_key(write[1]) in self.scattered:
                self.write(index, bsym, *write)
            elif is_update_aliases(bsym):
                self.rename(bsym)
            elif _makes_a_view(bsym) and self.written(tensor_args(bsym)[0]):
                continue  # made where it is read, from the base's latest value
            else:
                self.out.append(self.swapped(bsym))
                for t in tensor_outs(bsym):  # a storage starts as the tensor an op makes, which views are taken of
                    if (storage := self.aliases.storage_key(t)) in self.scattered and storage not in self.base:
                        self.base[storage], self.views[storage] = t, {}
        return self.out


def scatter_writes_through_views(trace: TraceCtx) -> TraceCtx:
    """Rewrite each write into a storage that ``scattered_storages`` names into a scatter into its base."""
    if not any(map(thunder_inplace_write, trace.bound_symbols)):
        return trace
    if not arguments_requiring_grad(trace) and not (
        any(map(_is_diagonal, trace.bound_symbols)) and _inductor_may_make_diagonals()
    ):
        return trace  # nothing differentiated, and no chain through a diagonal Inductor makes: no cost without grad
    aliases = Aliases(trace.bound_symbols)
    chains = _view_chains(trace, aliases)
    scattered = scattered_storages(trace, aliases, chains)
    if not scattered:
        return trace
    arguments = {s: a for s, (a, *_) in _argument_storages(trace, aliases).items() if s in scattered}
    new_trace = from_trace(trace)
    overwrites = overwrites_of_differentiated_values(trace, aliases)
    scatterer = _Scatterer(new_trace, aliases, chains, scattered, arguments, overwrites)
    new_trace.bound_symbols = scatterer.run(trace.bound_symbols)
    new_trace.set_provenance(TraceProvenance("thunder_ext: scatter writes through views into their bases"))
    return new_trace
