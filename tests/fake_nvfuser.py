"""A stand-in for nvFuser on a CPU: a thunder ``FusionExecutor`` whose ``fuse`` runs a region's prims one
after another with the PyTorch executor (``copy_to_out_`` as ``out.copy_``), and a fusion pass that builds
its regions the way nvFuser's does (a fusion bound symbol over flattened prims, then thunder's
rematerialization).

``nvfuser_write_blocker``, the fallback that rebuilds a region and the repair of rematerialization run on
it exactly as on nvFuser's regions. Because it runs a region's ops in their order, it cannot show what
nvFuser's own scheduling does with an alias output (tests/test_gpu.py's part); it shows what the
extension does around the regions: which writes it keeps in them, how it gives the others back, and
in what order everything then runs.
"""

from types import SimpleNamespace

from thunder.core import prims
from thunder.core.codeutils import SigInfo
from thunder.core.proxies import unvariableify, variableify
from thunder.core.rematerialization import rematerialize
from thunder.core.trace import TraceCtx, from_trace, tracectx
from thunder.core.transforms import Transform
from thunder.executors.passes import transform_for_execution, update_fusion_call_ctx
from thunder.executors.torchex import ex as torch_ex
from thunder.extend import FusionExecutor

import thunder_ext
from thunder_ext.primitive import copy_to_out_
from thunder_ext.transforms.fusion_regions import ELEMENTWISE_PRIM_IDS


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


class FakeFuser(FusionExecutor):
    def __init__(self):
        super().__init__("fake_nvfuser")

    def fuse(self, region, fusion_counter):
        inputs, outputs = [unvariableify(v) for v in region.inputs], [unvariableify(v) for v in region.outputs]
        bsyms = list(region.bound_symbols)
        return self.register_temporary_operation(
            f"nvFusion{fusion_counter}", runnable(bsyms, inputs, outputs), inputs=inputs, outputs=outputs, bsyms=bsyms
        )


fake_nvfuser = FakeFuser()


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


# What the fake nvFuser fuses: elementwise prims and a reduction that its regions can run with PyTorch, and the writes.
FUSIBLE = {
    i for i in ELEMENTWISE_PRIM_IDS | {prims.PrimIDs.SUM, prims.PrimIDs.SHALLOW_COPY} if i in torch_ex.implmap
} | {copy_to_out_.id}


def fusible_prims(bsym):
    parts = flat_prims(bsym)
    return parts if parts and all(p.sym.id in FUSIBLE for p in parts) else None


def others_first(bsyms):
    """A topological order that runs the ops the fake nvFuser cannot fuse as early as dataflow allows, so
    that fusible ops cluster as nvFuser's dataflow-based grouping would cluster them."""
    *body, ret = bsyms
    pending = {o.name for b in body for o in b.flat_proxy_outs}
    order = []
    while body:
        ready = [b for b in body if not pending.intersection(p.name for p in b.flat_proxy_args)]
        pick = next((b for b in ready if fusible_prims(b) is None), ready[0])
        body.remove(pick)
        order.append(pick)
        pending.difference_update(o.name for o in pick.flat_proxy_outs)
    return [*order, ret]


class FakeFusionPass(Transform):
    """Each maximal run of consecutive fusible ops becomes one region of the fake nvFuser, then thunder's
    rematerialization runs, as in nvFuser's fusion pass."""

    def transform_trace_post_optimization(self, trace, **kwargs):
        groups: list[tuple[bool, list]] = []  # (fused, bound symbols)
        for b in others_first([b for b in trace.bound_symbols if b.sym.name != "python_del"]):
            parts = fusible_prims(b)
            if parts and groups and groups[-1][0]:
                groups[-1][1].extend(parts)
            else:
                groups.append((parts is not None, parts or [b]))
        bsyms = []
        for i, (fused, group) in enumerate(groups):
            if not fused:
                bsyms += group
                continue
            produced = {o.name for b in group for o in b.flat_proxy_outs}
            inputs = {p.name: p for b in group for p in b.flat_proxy_args if p.name not in produced}
            later = {p.name for _, g in groups[i + 1 :] for b in g for p in b.flat_proxy_args}
            outputs = [o for b in group for o in b.flat_proxy_outs if o.name in later]
            bsyms.append(fake_nvfuser.fuse(fusion_region(inputs.values(), outputs, group), i))
        new = from_trace(trace)
        new.bound_symbols = bsyms
        return update_fusion_call_ctx(rematerialize(new))


def fake_nvfuser_jit(fn, **kwargs):
    return thunder_ext.jit(fn, transforms=[FakeFusionPass()], **kwargs)
