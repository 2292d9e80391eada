"""A stand-in for nvFuser on a CPU: a thunder ``FusionExecutor`` whose ``fuse`` runs a region's prims one
after another with the PyTorch executor (``copy_to_out_`` as ``out.copy_``), and a fusion pass that builds
its regions the way nvFuser's does (thunder's grouping of the trace's ops, a fusion bound symbol over
flattened prims, then thunder's rematerialization), with an elimination of common subexpressions as nvFuser's pass
ends with one (thunder's, over the trace's ops; nvFuser's runs inside its regions too).

nvFuser's rules (``NVFUSER_RULES``, registered for the stand-in as for nvFuser itself), the fallback that
rebuilds a region and the repair of rematerialization run on it exactly as on nvFuser's regions. Because it runs a region's ops in their order, it cannot show what
nvFuser's own scheduling does with an alias output (tests/test_gpu.py's part); it shows what the
extension does around the regions: which writes it keeps in them, how it gives the others back, and
in what order everything then runs. One thing of nvFuser's own it does imitate: an output that nvFuser's alias
analysis would return as a view of a region input (``nvfuser_alias_of``) is returned as one.
"""

from types import SimpleNamespace

from thunder.core import prims
from thunder.core.codeutils import SigInfo
from thunder.core.proxies import unvariableify, variableify
from thunder.core.rematerialization import rematerialize
from thunder.core.trace import TraceCtx, from_trace, tracectx
from thunder.core.transform_common import cse, dce
from thunder.core.transforms import Transform
from thunder.executors.data_dependent_partition import Node, fuse_bound_symbols
from thunder.executors.passes import del_last_used, transform_for_execution, update_fusion_call_ctx
from thunder.executors.pythonex import clear_mutable_collection
from thunder.executors.torchex import ex as torch_ex
from thunder.extend import FusionExecutor

import thunder_ext
from thunder_ext.transforms.regions.nvfuser import NVFUSER_RULES
from thunder_ext.primitive import copy_to_out_
from thunder_ext.transforms.op_kinds import ELEMENTWISE_PRIM_IDS, is_view_op, tensor_args
from thunder_ext.transforms.aliasing_as_traced import (
    cse_keeping_written_storage_apart,
    nvfuser_may_run_as_a_view,
    keep_written_storage_aliased_as_traced,
)
from thunder_ext.transforms.regions.rules import register_region_rules


def runnable(bsyms, inputs, outputs):
    """The prims ``bsyms`` as a Python function of ``inputs`` returning ``outputs``, run by PyTorch
    (as thunder's torch.compile executor builds its regions, without the compiling)."""
    trace = TraceCtx(None)
    trace.args, trace.kwargs, trace.names = inputs, {}, {a.name for a in inputs}
    with tracectx(trace):
        for a in inputs:
            prims.unpack_trivial(a, name=a.name)
    trace.bound_symbols += [*bsyms, prims.python_return.bind(outputs, output=None)]
    for name in {o.name for b in trace.bound_symbols for o in b.flat_proxy_outs} - trace.names:
        trace.add_name(name)
    trace._siginfo = SigInfo("region")
    trace._siginfo.args = [(a.name, None) for a in inputs]
    return transform_for_execution(trace, (thunder_ext.inplace_ex, torch_ex)).python_callable(include_decorators=False)


def nvfuser_alias_of(bsyms, inputs, output):
    """The position among ``inputs`` of the region input nvFuser would return ``output`` a view of: one reached
    through copies it runs as meta ops (a clone, a reduction over size-1 axes: ``aliasing_as_traced``) and views
    that keep every element (a slice is not imitated); None if none."""
    producers = {o.name: b for b in bsyms for o in b.flat_proxy_outs}
    names = [a.name for a in inputs]
    t = output
    while t.name not in names:
        producer = producers.get(t.name)
        if producer is None or not (is_view_op(producer) or nvfuser_may_run_as_a_view(producer)):
            return None
        t = tensor_args(producer)[0]
    return names.index(t.name) if t.numel == output.numel and t is not output else None


def _returning_aliases(fn, aliased):
    def region(*args):
        results = fn(*args)  # the list of the region's outputs
        for k, i in aliased.items():
            results[k] = args[i].view(results[k].shape)  # the input's own storage, as nvFuser returns it
        return results

    return region


class FakeFuser(FusionExecutor):
    def __init__(self):
        super().__init__("fake_nvfuser")

    def can_fuse(self, bsym):
        return fusible_prims(bsym) is not None

    def fuse(self, region, fusion_counter):
        inputs, outputs = [unvariableify(v) for v in region.inputs], [unvariableify(v) for v in region.outputs]
        bsyms = list(region.bound_symbols)
        aliased = {k: i for k, o in enumerate(outputs) if (i := nvfuser_alias_of(bsyms, inputs, o)) is not None}
        return self.register_temporary_operation(
            f"nvFusion{fusion_counter}",
            _returning_aliases(runnable(bsyms, inputs, outputs), aliased),
            inputs=inputs,
            outputs=outputs,
            bsyms=bsyms,
        )


fake_nvfuser = FakeFuser()
register_region_rules(fake_nvfuser, NVFUSER_RULES)


def fusion_region(inputs, outputs, bsyms):
    """A region in the form ``FusionExecutor.fuse`` takes."""
    inputs, outputs = tuple(map(variableify, inputs)), tuple(map(variableify, outputs))
    return SimpleNamespace(inputs=inputs, outputs=outputs, bound_symbols=list(bsyms))

def flat_prims(bsym):
    """The prims an execution-trace op runs, or None if it runs something that is not a prim."""
    if bsym.sym.is_prim and not bsym.sym.executor:
        return [bsym]
    if not bsym.subsymbols:
        return None
    parts = [flat_prims(s) for s in bsym.subsymbols]
    return None if None in parts else [p for part in parts for p in part]


# What the fake nvFuser fuses: elementwise prims, a reduction and a clone that its regions can run with PyTorch, and
# the writes.
FUSIBLE = {
    i
    for i in ELEMENTWISE_PRIM_IDS | {prims.PrimIDs.SUM, prims.PrimIDs.SHALLOW_COPY, prims.PrimIDs.CLONE}
    if i in torch_ex.implmap
} | {copy_to_out_.id}


def fusible_prims(bsym):
    parts = flat_prims(bsym)
    return parts if parts and all(p.sym.id in FUSIBLE for p in parts) else None


class FakeFusionPass(Transform):
    """Groups the ops as nvFuser's fusion pass does, with thunder's ``fuse_bound_symbols`` (consecutive fusible
    ops, unless the ``fusion_type`` option asks for dataflow); each group of fusible ops becomes one region of
    the fake nvFuser over their prims; then thunder's rematerialization and dead-code elimination run, as in
    nvFuser's pass. First, common subexpressions are eliminated as the extension lets nvFuser's pass do it."""

    cse = staticmethod(cse_keeping_written_storage_apart(cse))  # as the extension wraps nvFuser's

    def transform_trace_post_optimization(self, trace, **kwargs):
        # what the extension's fusion pass does for nvFuser, which the stand-in is not among the executors to get
        trace = keep_written_storage_aliased_as_traced(trace, executors=[fake_nvfuser])
        trace = self.cse(trace)
        undeleted = from_trace(trace)
        undeleted.bound_symbols = [b for b in trace.bound_symbols if b.sym.name != "python_del"]

        def fusible(node: Node) -> bool:
            return len(node.group_bsyms) > 1 or fusible_prims(node.group_bsyms[0]) is not None

        groups = fuse_bound_symbols(undeleted, lambda a, b: fusible(a) and fusible(b))
        bsyms = []
        for i, group in enumerate(groups):
            parts = [fusible_prims(b) for b in group]
            if None in parts:
                bsyms += group
                continue
            region_prims = [p for part in parts for p in part]
            produced = {o.name for b in region_prims for o in b.flat_proxy_outs}
            inputs = {p.name: p for b in region_prims for p in b.flat_proxy_args if p.name not in produced}
            later = {p.name for g in groups[i + 1 :] for b in g for p in b.flat_proxy_args}
            outputs = [o for b in region_prims for o in b.flat_proxy_outs if o.name in later]
            bsyms.append(fake_nvfuser.fuse(fusion_region(inputs.values(), outputs, region_prims), i))
        new = from_trace(trace)
        new.bound_symbols = bsyms
        fused = update_fusion_call_ctx(dce(rematerialize(new)))
        # thunder fuses before it adds the dels and, in a backward, the clearing of its collections (which dce drops:
        # they have no outputs); the stand-in runs after, so it adds them again
        clears = any(b.sym.id == clear_mutable_collection.id for b in trace.bound_symbols)
        return del_last_used(fused, clear_mutable_collections=clears)


def fake_nvfuser_jit(fn, **kwargs):
    return thunder_ext.jit(fn, transforms=[FakeFusionPass()], **kwargs)
