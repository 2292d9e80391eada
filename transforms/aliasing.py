"""Which proxies of a trace share storage: the ``Aliases`` analysis, over what each op is
(``transforms/op_kinds.py``: views, writes, renames).

Shared by the functionalization pass and the aliasing checker. The analysis over-approximates
sharing on purpose: two proxies count as sharing storage if any op in the trace *may* make one a
view of the other (``op_kinds.is_view_op``: thunder's own list of view-returning and may-return-view ops, plus the
view prims). Over-approximation can only turn an in-place write into a copy, never the reverse.

Two relations are kept:
- *same tensor*: the proxies are the same runtime tensor under different names (``update_aliases``,
  the result of an in-place op or of a write, which is its destination);
- *same storage*: the above, or one is a view of the other (possibly another region), or both are
  renamed by one ``share_storage`` (arguments that share storage at different sizes, ``f(x, x[0])``,
  which no op of the trace relates: ``thunder_ext.thunder026.alias_updates``).

``may_overlap`` refines *same storage* for slices: a tensor sliced with constant bounds and steps, through
slices only, from a tensor that is no view (an argument, or an op's fresh result) covers a box of that
tensor's indices, and two boxes of one tensor that are disjoint in some dimension share no element
(distinct indices of a tensor address distinct memory; a written tensor where they would not, an expanded
one, is refused by PyTorch itself). Anything else that shares storage may overlap.
"""

from __future__ import annotations

from collections.abc import Iterable

from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol

from thunder_ext.executors.torch_inplace import share_storage
from thunder_ext.transforms.op_kinds import (
    is_update_aliases,
    is_view_op,
    tensor_args,
    tensor_outs,
    thunder_op_id,
    write_destination,
)


class _UnionFind:
    def __init__(self) -> None:
        self._parent: dict[str, str] = {}
        self._members: dict[str, list[str]] = {}  # root -> every name of its class (absent: the root alone)

    def find(self, x: str) -> str:
        root = x
        while self._parent.get(root, root) != root:
            root = self._parent[root]
        while x != root:  # path compression
            self._parent[x], x = root, self._parent.get(x, x)
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if len(self.members(ra)) < len(self.members(rb)):  # the smaller class joins: linear overall
            ra, rb = rb, ra
        self._parent[rb] = ra
        self._members.setdefault(ra, [ra]).extend(self._members.pop(rb, [rb]))

    def members(self, x: str) -> list[str]:
        root = self.find(x)
        return self._members.get(root, [root])


# Per dimension of a tensor: the indices start, start + step, ... (count of them).
Box = tuple[tuple[int, int, int], ...]


def _only_slice(bsym: BoundSymbol) -> BoundSymbol | None:
    """The ``prims.slice`` that ``bsym`` amounts to (it, its decomposition down to that prim alone, or an
    executor's implementation of that prim, which takes the prim's arguments: the PyTorch executor's slice outside a
    region, which GPU run 9 found taken for another view, docs/gpu.md)."""
    while bsym.sym.id != PrimIDs.SLICE:
        if not bsym.subsymbols and thunder_op_id(bsym) == PrimIDs.SLICE:
            return bsym
        if len(bsym.subsymbols) != 1:
            return None
        bsym = bsym.subsymbols[0]
    return bsym


def _sliced(box: Box, slice_: BoundSymbol) -> Box | None:
    """``box`` narrowed by ``prims.slice(a, starts, ends, steps)``; None if a bound is not a constant."""
    _, starts, ends, *steps = slice_.args
    steps = steps[0] if steps and steps[0] is not None else [1] * len(starts)
    if not all(type(v) is int for v in (*starts, *ends, *steps)) or len(starts) != len(box):
        return None
    return tuple(
        (start + s * step, step * st, max(0, (e - s + st - 1) // st))
        for (start, step, _), s, e, st in zip(box, starts, ends, steps)
    )


def _disjoint(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    (a0, da, na), (b0, db, nb) = a, b
    if na == 0 or nb == 0 or a0 + (na - 1) * da < b0 or b0 + (nb - 1) * db < a0:
        return True
    return da == db and (a0 - b0) % da != 0  # interleaved: x[::2] and x[1::2]


class Aliases:
    """Same-tensor and same-storage relations over the tensor proxies of ``bsyms``, and the boxes of slices."""

    def __init__(self, bsyms: Iterable[BoundSymbol]) -> None:
        self._tensor = _UnionFind()
        self._storage = _UnionFind()
        self._box: dict[str, tuple[str, Box]] = {}  # a slice -> (the tensor it slices, its box of that tensor)
        self._views: set[str] = set()  # results of other views: no box, and no tensor that boxes refer to
        self._extent: dict[str, tuple[int, ...]] = {}  # a tensor that boxes refer to -> its shape
        for bsym in bsyms:
            self.add(bsym)

    def add(self, bsym: BoundSymbol) -> None:
        outs = tensor_outs(bsym)
        if bsym.sym.is_fusion:
            # A region's results are those of its ops: a write's is its `out`, and a view op's may be a view
            # (nvFuser can return one as a view of a region input), so its ops relate them as anywhere else.
            for sub in bsym.subsymbols:
                self.add(sub)
        elif is_update_aliases(bsym):
            args = tensor_args(bsym)
            for before, after in zip(args, outs):
                self._same_tensor(before.name, after.name)
            if bsym.sym.id == share_storage.id:
                for other in args[1:]:
                    self._storage.union(args[0].name, other.name)
        elif (dest := write_destination(bsym)) is not None:
            for out in outs:
                self._same_tensor(dest.name, out.name)
        elif is_view_op(bsym) and (args := tensor_args(bsym)):
            for out in outs:
                self._storage.union(args[0].name, out.name)
            slice_, region = _only_slice(bsym), self._region(args[0])
            box = _sliced(region[1], slice_) if slice_ is not None and region is not None else None
            if box is not None and len(outs) == 1:
                self._box[outs[0].name] = (region[0], box)
                if args[0].name not in self._box:
                    self._extent[region[0]] = tuple(args[0].shape)
            else:
                self._views.update(out.name for out in outs)

    def _same_tensor(self, a: str, b: str) -> None:
        self._tensor.union(a, b)
        self._storage.union(a, b)
        for x, y in ((a, b), (b, a)):  # the same tensor: the same box, or the same lack of one
            if x in self._box:
                self._box.setdefault(y, self._box[x])
            if x in self._views:
                self._views.add(y)

    def _region(self, t: TensorProxy) -> tuple[str, Box] | None:
        """The tensor that ``t`` slices and its box of it (``t`` itself, whole, if it is no view); None if unknown."""
        if t.name in self._box:
            return self._box[t.name]
        if t.name in self._views or not all(type(d) is int for d in t.shape):
            return None
        return t.name, tuple((0, 1, d) for d in t.shape)

    def may_overlap(self, a: TensorProxy, b: TensorProxy) -> bool:
        """Whether ``a`` and ``b`` may share an element: they share storage, and are not slices of one
        tensor with disjoint boxes."""
        if not self.same_storage(a, b):
            return False
        ra, rb = self._region(a), self._region(b)
        if ra is None or rb is None or self._tensor.find(ra[0]) != self._tensor.find(rb[0]):
            return True
        return not any(_disjoint(x, y) for x, y in zip(ra[1], rb[1]))

    def same_tensor(self, a: TensorProxy, b: TensorProxy) -> bool:
        return self._tensor.find(a.name) == self._tensor.find(b.name)

    def contiguous_slice(self, a: TensorProxy) -> bool:
        """Whether ``a`` is a tensor the trace made or took whole, or a slice of one that is contiguous where that
        tensor is: its axes after some axis are whole, that one's step is 1, and those before it hold one element.
        No other view (a transpose, a reshape, a diagonal) made it."""
        if a.name in self._views:
            return False
        if a.name not in self._box:
            return True
        base, box = self._box[a.name]
        inner = list(zip(box, self._extent[base]))
        while inner and inner[-1][0] == (0, 1, inner[-1][1]):
            inner.pop()  # whole axes, innermost first
        if inner and inner[-1][0][1] == 1:
            inner.pop()  # the one partial axis, of step 1
        return all(n == 1 for (_, _, n), _ in inner)

    def same_storage(self, a: TensorProxy, b: TensorProxy) -> bool:
        return self._storage.find(a.name) == self._storage.find(b.name)

    def tensor_key(self, a: TensorProxy) -> str:
        return self._tensor.find(a.name)

    def storage_key(self, a: TensorProxy) -> str:
        return self._storage.find(a.name)

    def sharing_storage(self, a: TensorProxy) -> list[str]:
        """The names of every proxy that shares storage with ``a``, ``a`` among them."""
        return self._storage.members(a.name)
