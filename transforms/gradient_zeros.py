"""The zeros thunder's autodiff makes for a missing cotangent reach the fusion passes with their prims.

Rule (``give_zeros_their_prims``, run just before the fusion passes): every ``ltorch.zeros`` bound without
subsymbols gets the ones tracing it gives (``ltorch.full``, ``prims.full``), keeping its output.

thunder 0.2.6's autodiff binds such a ``zeros`` for the gradient of an intermediate that receives no cotangent
(``ltorch.zeros.bind(...)`` in ``thunder/transforms/autodiff.py``, ``grad_transform_on_trace``). A fusion pass may
take it into a region, and the ``dce`` that ends thunder's torch.compile fusion pass then drops it from the
region as a no-op (``_remove_noop_subsymbols`` in ``thunder/core/transform_common.py``: a subsymbol that is no
prim and has no subsymbols). The region still reads its output, which no op makes::

    [t47, t44] = TorchCompile0(a0, a1, a2)
      # t50 = ltorch.zeros(1, 1, 1, device=..., dtype=...)    <- dropped
      # t44 = prims.gather(t50, a1, 0)

Dynamo then raises ``name 't50' is not defined``, or a region split after grouping reads ``t50`` as an input
(``UnboundLocalError``). Stock ``thunder.jit`` with that executor fails alike:
``a, b = torch.split(x, 2); return (a * 2).exp()`` with ``x`` requiring grad (``b``'s cotangent).
"""

from __future__ import annotations

import thunder.torch as ltorch
from thunder.core.proxies import variableify
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.transforms.traced import traced_ops


def _is_bare_zeros(bsym: BoundSymbol) -> bool:
    return bsym.sym.id == ltorch.zeros.id and not bsym.subsymbols


def give_zeros_their_prims(trace: TraceCtx) -> TraceCtx:
    """``trace`` with each bare ``ltorch.zeros`` given its subsymbols (module docstring)."""
    if not any(map(_is_bare_zeros, trace.bound_symbols)):
        return trace
    new = from_trace(trace)
    new.bound_symbols = [_with_its_prims(new, b) if _is_bare_zeros(b) else b for b in trace.bound_symbols]
    new.set_provenance(TraceProvenance("Zeros of missing cotangents with their prims (thunder_ext)"))
    return new


def _with_its_prims(trace: TraceCtx, bsym: BoundSymbol) -> BoundSymbol:
    out = bsym.output
    traced, (zeros,) = traced_ops(trace, lambda: ltorch.zeros(*out.shape, device=out.device, dtype=out.dtype))
    return bsym.from_bsym(subsymbols=zeros.from_bsym_swap_proxies({variableify(traced): out}).subsymbols)
