"""Buffer reuse: an elementwise op computes into a buffer that is dead or about to be overwritten.

Rule 1, a dead argument: ``y = op(..., a, ...)``, an elementwise op of the PyTorch executor that has an ``out=`` form
(``executors.torch_inplace.INTO_OPS``), runs as ``<op>_into(..., a, ..., out=a)`` when ``a``

- is an intermediate this trace allocated: made by an op that returns fresh storage (not a view, not
  a write, not ``update_aliases``, not a fusion), sharing storage with no other tensor of the trace;
- has ``y``'s shape, dtype and device;
- is used by nothing after the op (not returned, not an ordering edge of a later write).

Rule 2, the target of the next write: ``y = op(...)``, elementwise as above, runs as ``<op>_into(..., out=o)``
when its only consumer is an elementwise op that writes ``o`` in place (``op2(y, ..., out=o)``, from
the checker), ``y`` has ``o``'s shape, dtype and device, ``op`` reads ``o``'s storage only as ``o``
itself, ``op2`` reads it only through ``y`` (not as an operand: ``add(o, y, out=o)`` needs ``o``'s old
value), and nothing between the two touches it (a value an earlier reuse computed into ``o`` counts: of two
operands of ``op2``, only one may go into ``o``). So
``exp_avg_sq.mul_(b2).addcmul_(g, g)`` runs both steps in ``exp_avg_sq``, as eager does.

An elementwise kernel reads element i before it writes element i, so an output that is exactly one of
its inputs is safe; a dead ``a`` has no reader left to see it overwritten, and ``o``'s old value has
none but ``op`` itself. The pass runs after the aliasing checker, on the final order, and moves nothing.

Why: on a CPU a fresh buffer is not free. A buffer of a MiB page-faults on first touch; in the
benchmark's Adam step, ``exp_avg_sq.sqrt() / c`` divided 2.3x slower into a fresh buffer than into
a reused one (docs/benchmarks.md).
"""

from __future__ import annotations

from collections import Counter

from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from thunder_ext.executors.torch_inplace import into_form, is_elementwise_write
from thunder_ext.transforms.op_kinds import is_update_aliases, is_view_op, tensor_args, tensor_outs, write_destination
from thunder_ext.transforms.trace_index import END, TOP, TraceIndex


def _makes_fresh_storage(bsym: BoundSymbol) -> bool:
    return not (
        bsym.sym.is_fusion or is_view_op(bsym) or is_update_aliases(bsym) or write_destination(bsym) is not None
    )


def reuse_dead_buffers(trace: TraceCtx) -> TraceCtx:
    """Run elementwise ops into dead buffers or into the target of the write they feed (the rules above)."""
    index = TraceIndex.of_execution_trace(trace)
    bsyms, aliases = index.ops, index.aliases
    inputs = {p.name for p in tree_flatten((trace.args, trace.kwargs))[0] if isinstance(p, Proxy)}
    tensors = {t.name: t for b in bsyms for t in (*tensor_args(b), *tensor_outs(b))}
    sharing = Counter(aliases.storage_key(t) for t in tensors.values())
    fresh = {t.name for b in bsyms if _makes_fresh_storage(b) for t in tensor_outs(b)} - inputs

    def dead_buffer(k: int, bsym: BoundSymbol) -> TensorProxy | None:
        (y,) = tensor_outs(bsym)
        for a in tensor_args(bsym):
            if (
                a.name in fresh
                and sharing[aliases.storage_key(a)] == 1
                and index.slots(index.readers(a))[-1] == k
                and (a.shape, a.dtype, a.device) == (y.shape, y.dtype, y.device)
            ):
                return a
        return None

    def next_write_target(k: int, bsym: BoundSymbol) -> TensorProxy | None:
        (y,) = tensor_outs(bsym)
        if len(uses := index.slots(index.readers(y))) != 1:
            return None
        write = bsyms[uses[0]]
        if not is_elementwise_write(write) or not isinstance(o := write.kwargs.get("out"), TensorProxy):
            return None
        if (y.shape, y.dtype, y.device) != (o.shape, o.dtype, o.device):
            return None
        if any(aliases.same_storage(a, o) and not aliases.same_tensor(a, o) for a in tensor_args(bsym)):
            return None  # op reads another view of o: its elements would move under it
        read = [p for p in tree_flatten((write.args, {**write.kwargs, "out": None}))[0] if isinstance(p, TensorProxy)]
        if any(aliases.same_storage(a, o) for a in read if a.name != y.name):
            return None  # op2 reads o's old value (o itself too, as an operand): y must not overwrite it first
        if _touched_between(index, o, k, uses[0]):
            return None
        return o

    reused = False
    for k, bsym in enumerate(bsyms):
        if (into_op := into_form(bsym)) is None:
            continue
        if (a := dead_buffer(k, bsym)) is None:
            a = next_write_target(k, bsym)  # a proxy's truth value is not its presence: no `or` here
        if a is not None:
            into = into_op.bind(*bsym.args, **bsym.kwargs, out=a, output=bsym.output)
            into.subsymbols, into.header = [bsym], bsym.header
            index.replace(k, into)  # y now lives in a's storage: the next op that would reuse a must see it
            reused = True
    if not reused:
        return trace
    return index.rewritten(trace, "thunder_ext: reuse dead buffers")


def _touched_between(index: TraceIndex, o: TensorProxy, i: int, j: int) -> bool:
    """Whether an op between slots ``i`` and ``j`` takes or returns a tensor sharing ``o``'s storage."""
    aliases, between = index.aliases, {"after": (i, END), "before": (j, TOP)}
    uses = index.slots([*index.storage_readers(o, **between), *index.storage_producers(o, **between)])
    return any(aliases.same_storage(t, o) for s in uses for t in (*tensor_args(index.ops[s]), *tensor_outs(index.ops[s])))
