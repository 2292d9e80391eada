"""nvFuser's regions: when one may keep a ``copy_to_out_`` as an output aliasing ``out``.

nvFuser runs the write itself (``executors/nvfuser_inplace.py``: ``fd.add_output(..., alias_input=out)``), but
it schedules a region's ops as it likes, so a write stays in a region only where ``nvfuser_write_blocker``'s rules
prove that no op of the region sees it early (1 to 4) and that nvFuser can alias it at all (5 to 7); otherwise the checker
gives it back to the PyTorch executor (``transforms/regions/give_back.py``). Registered only where thunder has
loaded nvFuser.
"""

from __future__ import annotations

from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol

from thunder_ext.executors.nvfuser_inplace import nvfuser_inplace_available
from thunder_ext.transforms.aliasing_as_traced import cse_keeping_written_storage_apart
from thunder_ext.transforms.op_kinds import (
    data_args,
    is_copy_to_out,
    is_elementwise,
    is_view_op,
    tensor_args,
    thunder_inplace_write,
)
from thunder_ext.transforms.regions.rules import RegionOps, RegionRules, elementwise_cone, register_region_rules


def nvfuser_write_blocker(region: RegionOps, write: BoundSymbol) -> str | None:
    """Why the nvFuser region ``region`` cannot run ``write = copy_to_out_(c, out=o)``, one of its ops, as an
    output aliasing ``o``; None if it can.

    nvFuser writes an alias output into ``o``'s buffer at a point of its own choosing, in whichever
    kernel it schedules, so the region's own order says nothing about when ``o`` is overwritten. Rules:

    1. ``o`` is an input of the region: nvFuser aliases outputs to inputs only.
    2. ``c`` is computed in the region, by an op other than a write. Stock thunder's sharp edge: a
       region that only copies an input into another may run no kernel at all.
    3. ``c`` is not an output of the region, and no other op of the region reads it. Returned, it would
       share ``o``'s storage (stock thunder's other sharp edge, its issue 1109). The second half is
       conservative, as in thunder's own proposal of this primitive: whether nvFuser keeps ``c`` apart
       from ``o``'s buffer for its other readers could not be checked without a GPU.
    4. Every other op of the region that reads or writes ``o``'s storage, through any alias, is an
       elementwise prim that reads ``o`` itself and computes part of ``c`` alone (it is in
       ``c``'s private elementwise cone, ``elementwise_cone``): it reads element i of ``o`` only to
       compute element i of ``c``, which is what replaces it. Anything else may run in another kernel or
       thread after ``o`` is overwritten.
    5. Every axis of ``c`` is one nvFuser iterates: ``c`` is computed elementwise from a tensor of ``o``'s shape
       that no broadcast made. nvFuser gives an alias output ``o``'s layout by replaying ``o``'s axes onto it,
       and fails where an axis of ``c`` is a broadcast: ``x.copy_(y)`` with a 0-d ``y`` expanded to ``x``'s
       shape raised "INTERNAL ASSERT FAILED ... do not match for self replay" on an H100 (docs/gpu.md).
    6. ``o`` is a tensor the trace made or took whole, or a slice of one that is contiguous where that tensor is
       (``Aliases.contiguous_slice``): nvFuser writes an alias output right only into a dense tensor. On an H200,
       through a transposed view of an intermediate it swapped elements (``r3.transpose(0, 1).mul_(a1)``,
       cuda/found_16274bd1d4e6), and into a column slice of an argument it wrote the wrong elements (stock
       thunder's ``copy_`` too; a transposed argument, dense, it wrote right: ``scripts/gpu_probe.py``).
    7. (when the call runs) An argument that a kept write overwrites is laid out so: dense where ``o`` is all of
       it, contiguous where ``o`` is a slice. The prologue does not see strides, so the computation checks it
       first, before anything runs (``check_dense_argument``, ``NonDenseWriteError``).
    """
    computed, out = thunder_inplace_write(write)
    name, aliases = region.name, region.aliases
    if not any(a.name == out.name for a in region.inputs_sharing.get(aliases.storage_key(out), ())):
        return f"`{out.name}` is computed in `{name}`, and nvFuser aliases outputs to region inputs only"
    producer = region.producer(computed)
    if producer is None:
        return f"`{computed.name}` is not computed in `{name}`: an aliased copy of a region input may run no kernel"
    if is_copy_to_out(producer):
        return f"`{computed.name}` is the result of another write in `{name}`"
    if computed.name in region.outputs:
        return f"`{computed.name}` is also an output of `{name}`, which would share `{out.name}`'s storage"
    if reader := next((s for s in region.users.get(computed.name, ()) if s is not write), None):
        return f"`{reader.sym.name}` also reads `{computed.name}` in `{name}`"
    cone = elementwise_cone(region, write)
    for op in region.storage_readers.get(aliases.storage_key(out), ()):
        if op is write:
            continue
        for a in data_args(op):
            if aliases.same_storage(a, out) and not (id(op) in cone and aliases.same_tensor(a, out)):
                sharing = "" if a.name == out.name else f" (sharing storage with `{out.name}`)"
                return (
                    f"`{op.sym.name}` uses `{a.name}`{sharing} in `{name}`, "
                    f"and is not an elementwise step towards `{computed.name}` alone"
                )
    if not _iterated_at(region, computed, tuple(out.shape)):
        return f"`{computed.name}` is a broadcast to `{out.name}`'s shape, whose axes nvFuser cannot alias to `{out.name}`'s"
    if not aliases.contiguous_slice(out):
        return f"`{out.name}` is a view other than a contiguous slice, which nvFuser may write in another order"
    return None


def _iterated_at(region: RegionOps, t: TensorProxy, shape: tuple[int, ...]) -> bool:
    """Whether ``t`` is a region input of ``shape``, or is computed at ``shape`` by an op other than a
    broadcast: elementwise from such a tensor, or by any other op (a reduction, ``full``)."""
    if tuple(t.shape) != shape:
        return False
    producer = region.producer(t)
    if producer is None:
        return True
    if producer.sym.id == PrimIDs.BROADCAST_IN_DIM:
        return False
    if is_view_op(producer):  # keeps its input's axes; a view of another shape is refused, conservatively
        return _iterated_at(region, tensor_args(producer)[0], shape)
    if not is_elementwise(producer):
        return True
    return any(_iterated_at(region, a, shape) for a in tensor_args(producer))


NVFUSER_RULES = RegionRules(
    "nvFuser",
    in_order=False,
    blocker=nvfuser_write_blocker,
    how="in place in an nvFuser region",
    kept="`{region}` computes `{computed}` straight into `{out}`'s buffer",
    aliases_by_prims=True,
    dense_outs=True,
)


if nvfuser_inplace_available()[0]:
    from thunder.executors.nvfuserex_impl import ex as nvfuser_ex

    register_region_rules(nvfuser_ex, NVFUSER_RULES)
    # nvFuser's fusion pass ends with an elimination of common subexpressions of its own (its executor's `cse`
    # method, which thunder 0.2.6 offers no option to turn off): wrapped here, once, so that it makes no written
    # tensor one with another (transforms/aliasing_as_traced.py, rule 2)
    nvfuser_ex.cse = cse_keeping_written_storage_apart(nvfuser_ex.cse)
