"""What kind of op a bound symbol is, one predicate per question, asked by every pass and by the ``Aliases``
analysis (``transforms/aliasing.py``): whether it may return a view of its first argument (``is_view_op``), writes
in place and what (``thunder_inplace_write``, ``write_destination``, ``written_tensors``, ``fused_writes``), renames
tensors (``is_update_aliases``), is elementwise (``is_elementwise``) or may fail when it runs
(``may_fail_at_runtime``; ``how_it_indexes``, where an index out of range is its one failure); which tensors it
takes, reads and returns (``tensor_args``, ``data_args``, ``tensor_outs``); which thunder op an executor's symbol
runs (``thunder_op_id``); and the user's line it was traced from (``source_line``, ``located_at``).

Where unsure, a predicate answers the way that can only turn an in-place write into a copy: an op that may return a
view is a view (thunder's own lists of view-returning and may-return-view ops, plus the view prims), an op not known
to be elementwise is not, an op that takes an integer tensor may fail unless it is known not to.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import thunder.torch as ltorch
from thunder.core import dtypes, prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import get_source_line
from thunder.executors import torchex
from thunder.extend import Executor

from thunder_ext.executors.torch_inplace import checked_assert, checked_index, share_storage
from thunder_ext.primitive import copy_to_out_
from thunder_ext.thunder026.tables import VIEW_SYMBOL_IDS, has_elementwise_meta

# Thunder ops that return (or may return) a view of their first argument when run by PyTorch:
# thunder's own lists, and the view prims.
_VIEW_OP_IDS = frozenset(
    VIEW_SYMBOL_IDS
    | {
        PrimIDs.BROADCAST_IN_DIM,
        PrimIDs.RESHAPE,
        PrimIDs.SLICE,
        PrimIDs.SQUEEZE,
        PrimIDs.TRANSPOSE,
        PrimIDs.SHALLOW_COPY,
        PrimIDs.VIEW,
        PrimIDs.UNFOLD,
    }
)

WRITE_OUT_KWARG = "out"


def tensor_args(bsym: BoundSymbol) -> list[TensorProxy]:
    return [p for p in bsym.flat_proxy_args if isinstance(p, TensorProxy)]


def data_args(bsym: BoundSymbol) -> list[TensorProxy]:
    """The tensors ``bsym`` reads: a write's ``after`` only orders it, it reads nothing of them, and a
    region reads what its ops read (an input it takes only for a write's ``after`` may be overwritten)."""
    if bsym.sym.is_fusion:
        # a rename in the region (thunder's CUDA-graph regions take thunder's ``update_aliases``, and its ``del``
        # and return) reads nothing; a read of a rename's result reads what it renamed
        renamed: dict[str, set[str]] = {}
        read: set[str] = set()
        for s in bsym.subsymbols:
            if s.sym.id in (PrimIDs.DEL, PrimIDs.RETURN):
                continue
            if is_update_aliases(s) and s.sym.id != checked_index.id:
                for before, after in zip(tensor_args(s), tensor_outs(s)):
                    renamed[after.name] = renamed.get(before.name, {before.name})
                continue
            read.update(n for a in data_args(s) for n in renamed.get(a.name, {a.name}))
        return [t for t in tensor_args(bsym) if t.name in read]
    ordering_only = {p.name for p in bsym.kwargs.get("after", ())} if is_copy_to_out(bsym) else set()
    return [t for t in tensor_args(bsym) if t.name not in ordering_only]


def decomposed_data_args(bsym: BoundSymbol) -> list[Proxy]:
    """The arguments whose data ``bsym`` reads: those the prims of its decomposition take (all, for an op thunder
    does not decompose). ``full_like(x, v)`` reads none: it is ``full(x.shape, v)``, and once a later pass traces
    it so, nothing orders it after ``x``'s producer."""
    if not bsym.subsymbols:
        return bsym.flat_proxy_args
    read = {p.name for sub in bsym.subsymbols for p in decomposed_data_args(sub)}
    return [p for p in bsym.flat_proxy_args if p.name in read]


def tensor_outs(bsym: BoundSymbol) -> list[TensorProxy]:
    return [p for p in bsym.flat_proxy_outs if isinstance(p, TensorProxy)]


def thunder_op_id(bsym: BoundSymbol) -> Hashable:
    """The id of the thunder op an execution-trace bound symbol runs.

    An operator executor binds its own symbol (``torch.index_copy``) for the thunder op it claimed
    (``ltorch.index_copy``): its single subsymbol, or, for a thunder op with no decomposition (a prim,
    or an op thunder registers from torch as one of its own, such as ``torch.narrow``), the op that
    the executor's implementation map lists for it. Anything else is its own thunder op, a fusion too
    (a region of one op is still a region: ``fused_writes`` looks inside).
    """
    sym = bsym.sym
    if sym.executor is None or sym.is_fusion:
        return sym.id
    if len(bsym.subsymbols) == 1:
        return bsym.subsymbols[0].sym.id
    return _implemented_ops(sym.executor).get(sym.id, sym.id)


_IMPLEMENTED: dict[str, tuple[int, dict[Hashable, Hashable]]] = {}


def _implemented_ops(executor: Executor) -> dict[Hashable, Hashable]:
    """Operator id -> id of the thunder op it implements; rebuilt when the executor registers more.

    An operator that implements several (``diagonal``: ``torch.diagonal`` and ``torch.linalg.diagonal``;
    ``real``: ``torch.real`` and a prim) counts as a view if any of them is one: over-approximation.
    """
    size, table = _IMPLEMENTED.get(executor.name, (-1, {}))
    if size != len(executor.implmap):
        table = {}
        for op, impl in executor.implmap.items():
            if impl.symbol is not None and table.get(impl.symbol.id) not in _VIEW_OP_IDS:
                table[impl.symbol.id] = op
        _IMPLEMENTED[executor.name] = (len(executor.implmap), table)
    return table


def is_view_op(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` may return a view of its first tensor argument. ``to`` returns its input only where
    it changes neither dtype nor device and is not asked to copy; a conversion or a copy is a tensor of its
    own, read from the input when it runs (found by the fuzzer twice: taken for a view, a conversion of
    ``x[0]`` read after a write of ``x`` was an ordering error; so was thunder's ``prims.convert_element_type``,
    a copy that the PyTorch executor runs as ``to(..., copy=True)``)."""
    op = thunder_op_id(bsym)
    if op == ltorch.to.id and (args := tensor_args(bsym)) and isinstance(bsym.output, TensorProxy):
        same = (args[0].dtype, args[0].device) == (bsym.output.dtype, bsym.output.device)
        return same and not bsym.kwargs.get("copy", False)
    return op in _VIEW_OP_IDS


def is_update_aliases(bsym: BoundSymbol) -> bool:
    """A rename of tensors: thunder's ``update_aliases`` after a write, the extension's ``share_storage``, or
    its ``checked_index``, which returns the position it checked."""
    return bsym.sym.id in (PrimIDs.UPDATE_ALIASES, torchex.update_aliases.id, share_storage.id, checked_index.id)


def unpacks_an_argument(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` names an argument of the computation (no op computes what it returns)."""
    return bsym.sym.id in (PrimIDs.UNPACK_TRIVIAL, PrimIDs.UNPACK_SEQUENCE, PrimIDs.UNPACK_KEY, PrimIDs.UNPACK_ATTR)


def is_copy_to_out(bsym: BoundSymbol) -> bool:
    return thunder_op_id(bsym) == copy_to_out_.id


def is_thunder_copy(bsym: BoundSymbol) -> bool:
    """thunder's ``prims.copy_``, in which every in-place op of thunder's ends, as traced or as its executor runs it."""
    return bsym.sym.id in (PrimIDs.COPY_, torchex.copy_.id)


def thunder_inplace_write(bsym: BoundSymbol) -> tuple[TensorProxy, TensorProxy] | None:
    """``(computed, target)`` if ``bsym`` is a thunder in-place op (``ltorch.add_``, ``setitem_``...).

    Thunder decomposes every in-place torch op into its functional op(s) followed by
    ``prims.copy_(computed, target)``; that final copy is the write. ``copy_to_out_`` is one too.
    """
    if is_copy_to_out(bsym):
        return bsym.args[0], bsym.kwargs[WRITE_OUT_KWARG]
    if is_thunder_copy(bsym):
        return bsym.args[0], bsym.args[1]
    if bsym.subsymbols and bsym.subsymbols[-1].sym.id == PrimIDs.COPY_:
        copy = bsym.subsymbols[-1]
        return copy.args[0], copy.args[1]
    return None


def functional_reads(write: BoundSymbol) -> set[str]:
    """The names whose data the functional part of thunder's in-place op ``write`` reads: its target's for ``mul_``,
    ``masked_fill_``; not for ``zero_`` (``zeros_like(x)`` reads the shape), ``fill_``, ``copy_``."""
    return {p.name for functional in write.subsymbols[:-1] for p in decomposed_data_args(functional)}


def fused_writes(bsym: BoundSymbol) -> list[BoundSymbol]:
    """The ``copy_to_out_`` that a fusion (an nvFuser region) runs inside it; none for any other bound symbol."""
    return [s for s in bsym.subsymbols if is_copy_to_out(s)] if bsym.sym.is_fusion else []


def fused_thunder_copies(bsym: BoundSymbol) -> list[BoundSymbol]:
    """Thunder's own ``copy_`` that a fusion runs inside it (one its fusion pass took in: a write left to
    thunder, or one of an op its autodiff decomposed, such as ``batch_norm``'s running statistics)."""
    return [s for s in bsym.subsymbols if is_thunder_copy(s)] if bsym.sym.is_fusion else []


# Prims that compute element i of their result from element i of each tensor argument (thunder's prims
# do not broadcast). Taken from how thunder builds its elementwise prims (``has_elementwise_meta``), so that the
# set follows thunder; should that change, the set shrinks to the last four, which only turns in-place writes
# into copies. (``Tensor.to`` a dtype the tensor has is a shallow copy: ``addcmul`` and ``addcdiv`` are made of them.)
ELEMENTWISE_PRIM_IDS = frozenset(
    {s.id for s in vars(prims).values() if isinstance(s, Symbol) and has_elementwise_meta(s)}
    | {PrimIDs.WHERE, PrimIDs.LERP, PrimIDs.CONVERT_ELEMENT_TYPE, PrimIDs.SHALLOW_COPY}
)


def is_elementwise(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` is an elementwise prim, or an op made of them only (thunder's ``addcmul``)."""
    return bsym.sym.id in ELEMENTWISE_PRIM_IDS or (bool(bsym.subsymbols) and all(map(is_elementwise, bsym.subsymbols)))


# Elementwise prims that raise on some integer operands, as eager does: a zero divisor, a negative exponent.
_FAILING_ON_INTEGERS = frozenset({PrimIDs.DIV, PrimIDs.FMOD, PrimIDs.REMAINDER, PrimIDs.POW, PrimIDs.PY_FLOORDIV})


def is_index_like(t: TensorProxy) -> bool:
    """An integer tensor (not a boolean one): what an op may fail on, as an index or a divisor."""
    return dtypes.is_exact_dtype(t.dtype) and not dtypes.is_boolean_dtype(t.dtype)


def may_fail_at_runtime(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` may raise when it runs, which tracing cannot rule out (it checks shapes and dtypes): it
    takes an integer tensor, as an index that may be out of range or as an operand of integer division,
    remainder or power (or checks a position ahead of a region, ``checked_index``, or a user's ``assert`` on a
    tensor, ``checked_assert``). Other elementwise arithmetic, writes and renames cannot fail."""
    if bsym.sym.id in (checked_index.id, checked_assert.id):
        return True
    if not any(map(is_index_like, tensor_args(bsym))):
        return False
    return not (is_copy_to_out(bsym) or is_update_aliases(bsym) or _cannot_fail(bsym))


@dataclass(frozen=True)
class Indexing:
    """How an op that may fail only on an index out of range indexes: ``tensor`` along ``dim`` at ``index``; the
    extension's executor checks it as ``checked_as`` (``executors/torch_inplace.py``), with ``others``."""

    tensor: TensorProxy
    dim: int
    index: TensorProxy
    others: tuple[TensorProxy, ...]
    checked_as: str

    @property
    def bound(self) -> int | None:
        """The size the index must stay below, where the trace knows it."""
        size = self.tensor.shape[self.dim]
        return size if isinstance(size, int) else None


# thunder's ops, by name, whose only failure at runtime is an index out of range, as each indexes
_INDEXING: dict[str, Callable[[BoundSymbol], Indexing | None]] = {
    "index_copy": lambda op: Indexing(op.args[0], op.args[1], op.args[2], (op.args[3],), "index_copy_"),
    "index_add": lambda op: Indexing(op.args[0], op.args[1], op.args[2], (op.args[3],), "index_add_"),
    "index_select": lambda op: Indexing(op.args[0], op.args[1], op.args[2], (), "index_select"),
    "embedding": lambda op: None if _max_norm(op) is not None else Indexing(op.args[1], 0, op.args[0], (), "embedding"),
}


def _max_norm(embedding: BoundSymbol) -> float | None:
    """With a ``max_norm``, ``embedding`` also writes its weight."""
    return embedding.args[3] if len(embedding.args) > 3 else embedding.kwargs.get("max_norm")


def how_it_indexes(op: BoundSymbol) -> Indexing | None:
    """How ``op`` indexes, where its only failure at runtime is an index out of range; else None."""
    return _INDEXING[op.sym.name](op) if op.sym.name in _INDEXING else None


def _cannot_fail(bsym: BoundSymbol) -> bool:
    if bsym.sym.id in ELEMENTWISE_PRIM_IDS:
        return bsym.sym.id not in _FAILING_ON_INTEGERS
    return bool(bsym.subsymbols) and all(map(_cannot_fail, bsym.subsymbols))


def write_destination(bsym: BoundSymbol) -> TensorProxy | None:
    """The tensor whose storage ``bsym`` writes, if it writes one in place."""
    if WRITE_OUT_KWARG in bsym.kwargs and isinstance(bsym.kwargs[WRITE_OUT_KWARG], TensorProxy):
        # copy_to_out_ and the executors' in-place forms of it
        return bsym.kwargs[WRITE_OUT_KWARG]
    if (write := thunder_inplace_write(bsym)) is not None:
        return write[1]
    return None


def source_line(bsym: BoundSymbol) -> str:
    """``file:line: code`` of the user's line that ``bsym`` was traced from (``file:line`` where the file is
    gone); empty where the trace has none."""
    where = bsym.source_positions
    if bsym.source_filename is None or where is None or where.lineno is None:
        return ""
    code = get_source_line(bsym.source_filename, where.lineno).strip()
    return f"{bsym.source_filename}:{where.lineno}" + (f": {code}" if code else "")


def located_at(bsym: BoundSymbol, origin: BoundSymbol) -> BoundSymbol:
    """``bsym`` named as traced from ``origin``'s user line: what a pass emits in place of ``origin`` keeps its line,
    which the decisions and ``thunder.last_traces`` show."""
    return bsym.from_bsym(source_filename=origin.source_filename, source_positions=origin.source_positions)


def written_tensors(bsym: BoundSymbol) -> list[TensorProxy]:
    """The tensors whose storage ``bsym`` writes: its destination, or the ``out`` of each write a fusion runs
    (thunder's own ``copy_`` among them)."""
    if (dest := write_destination(bsym)) is not None:
        return [dest]
    return [thunder_inplace_write(w)[1] for w in (*fused_writes(bsym), *fused_thunder_copies(bsym))]
