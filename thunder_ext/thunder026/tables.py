"""thunder 0.2.6's tables that the extension's analyses read (view ops, elementwise prims), and one tag they reuse.

- ``VIEW_SYMBOL_IDS``: the ops thunder lists as returning, or maybe returning, a view of their first argument
  (``thunder.torch._syms_returning_views``, ``_syms_that_may_return_views``; private, and the only list of
  them). Retired by: a public "returns a view" tag on thunder's symbols.
- ``copy_into(a, b)``: thunder's own write of ``b`` into ``a`` (``thunder.torch._copy_``), the one every
  in-place op of thunder's ends in, so that the extension's passes see a write of an op of its own as they see
  thunder's. Looked up at each call: ``adapt_thunder`` replaces it by one that broadcasts. Retired by: a public
  ``copy_`` symbol that converts and broadcasts.
- ``has_elementwise_meta(prim)``: whether thunder made ``prim``'s meta with its elementwise meta factories
  (``thunder.core.prims._elementwise_unary_meta_factory``, ``_elementwise_binary_meta_factory``; private, and the
  only record of which prims are elementwise; ``transforms/op_kinds.py`` reads it). Retired by: a public
  "elementwise" tag on thunder's prims.
- ``RECOMPUTING_DIFFERS``: the tag thunder's rematerialization never recomputes (``OpTags.RANDOM_OP``: "a
  second run gives another value"), which the extension puts on what must not be recomputed across a write
  (``transforms/no_recomputation.py``). Retired by: a tag of thunder's for "do not rematerialize".
"""

from __future__ import annotations

import thunder.torch as ltorch
from thunder.core.prims import OpTags
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol

VIEW_SYMBOL_IDS = frozenset(s.id for s in (*ltorch._syms_returning_views, *ltorch._syms_that_may_return_views))

RECOMPUTING_DIFFERS = OpTags.RANDOM_OP


def copy_into(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    """thunder's ``_copy_(a, b)`` as it stands now: ``b`` converted to ``a``'s dtype and written into ``a``."""
    return ltorch._copy_(a, b)


def has_elementwise_meta(prim: Symbol) -> bool:
    """Whether thunder made ``prim``'s meta with ``_elementwise_unary_meta_factory`` or
    ``_elementwise_binary_meta_factory``: how thunder makes its elementwise prims."""
    return "_elementwise_" in prim.meta.__qualname__
