"""The ``copy_to_out_`` primitive: write ``computed`` into ``out``.

``computed`` is meant to be an intermediate that nothing else consumes, so an
executor may let ``out`` simply alias it (compute it in ``out``'s storage)
instead of copying. Whether that is allowed is not decided here: the
functionalization pass orders the write, and the aliasing checker proves (or
refuses) the in-place execution before any executor sees it.

``after`` carries ordering, not data: the results of every op that read the old
value of ``out``. They make "readers of the old value run before the write" a
dataflow fact, which every later pass that reorders (fusion, rematerialization)
must respect.

Its gradient is ``copy_``'s: the cotangent of the written value flows to ``computed``; the old value of
``out`` is overwritten, so it gets none, and ``after`` orders only.
"""

from __future__ import annotations

from collections.abc import Sequence

from thunder.core.prims import OpTags, get_grad, make_prim, put_grad
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.transforms import register_grad


class CopyToOutError(ValueError):
    """``copy_to_out_`` was given a ``computed`` that cannot be written into ``out``."""


def _copy_to_out_meta(computed: TensorProxy, *, out: TensorProxy, after: Sequence[Proxy] = ()) -> TensorProxy:
    for role, t in (("computed", computed), ("out", out)):
        if not isinstance(t, TensorProxy):
            raise CopyToOutError(f"copy_to_out_: `{role}` must be a tensor, got {type(t).__name__}")
    mismatches = [
        f"{what} {getattr(computed, what)} vs {getattr(out, what)}"
        for what in ("shape", "dtype", "device")
        if getattr(computed, what) != getattr(out, what)
    ]
    if mismatches:
        raise CopyToOutError(
            f"copy_to_out_: cannot write `{computed.name}` into `{out.name}`: " + "; ".join(mismatches)
        )
    return TensorProxy(like=out)


copy_to_out_ = make_prim(
    "thunder_ext.copy_to_out_",
    "copy_to_out_",
    meta=_copy_to_out_meta,
    tags=(OpTags.DONT_DCE,),
)


def _copy_to_out_grad(computed: TensorProxy, *, out: TensorProxy, after: Sequence[Proxy] = ()) -> TensorProxy:
    written = copy_to_out_(computed, out=out, after=after)
    put_grad(computed, get_grad(written))
    return written


register_grad(copy_to_out_, _copy_to_out_grad)
