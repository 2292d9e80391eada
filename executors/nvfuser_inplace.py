"""nvFuser support for ``copy_to_out_``: the write runs inside an nvFuser region, as an output aliasing ``out``.

``copy_to_out_(computed, out=o)`` translates to ``fd.add_output(fd.ops.set(computed), alias_input=o)``,
the form thunder's own ``prims.copy_`` takes in nvFuser: the region writes ``computed`` into ``o``'s
buffer, with no extra kernel and no extra buffer. ``after`` carries no data and is not translated.

Claiming needs nothing more than the registration: ``thunder_ext.executors.inplace_ex`` claims every
``copy_to_out_`` first (so each write always has an executor), and nvFuser's fusion pass then takes
the CUDA ones into its regions, because ``Executor.can_fuse`` looks through ``inplace_ex``'s operator
to the ``copy_to_out_`` it calls. Whether a region may keep a write is decided afterwards, on the
final trace, by ``thunder_ext.transforms.prove_inplace``, by ``NVFUSER_RULES`` (what nvFuser's alias
outputs require, and what falls back to a copy: docs/gpu.md).

Where nvFuser or CUDA is missing, nothing is registered and ``nvfuser_inplace_available()`` says
why; the writes then run on the PyTorch executor.
"""

from __future__ import annotations

import importlib.util

import torch
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.executors.nvfuserex import nvfuser_available, nvfuser_version, required_nvfuser_version

from thunder_ext.primitive import copy_to_out_
from thunder_ext.transforms.aliasing import data_args, is_copy_to_out, thunder_inplace_write
from thunder_ext.transforms.fusion_regions import RegionOps, RegionRules, elementwise_cone, register_region_rules

NOT_INSTALLED = "nvFuser is not installed (wheels exist for CPython 3.12 only)"
NO_CUDA = "CUDA is not available"


def nvfuser_inplace_available() -> tuple[bool, str]:
    """Whether nvFuser runs ``copy_to_out_`` here, and if not, why (``NOT_INSTALLED``, ``NO_CUDA``...)."""
    if importlib.util.find_spec("nvfuser") is None and importlib.util.find_spec("nvfuser_direct") is None:
        return False, NOT_INSTALLED
    if not torch.cuda.is_available():
        return False, NO_CUDA
    if not nvfuser_available():
        return False, _why_thunder_refuses_nvfuser()
    return True, f"nvFuser {nvfuser_version()}"


def _why_thunder_refuses_nvfuser() -> str:
    """nvFuser is installed and CUDA is there, but thunder does not load it: a failed import or an old version."""
    try:
        import nvfuser  # noqa: F401  (thunder swallows this error; it is the reason to report)
    except Exception as e:  # an ImportError, or an OSError from a build for another torch
        return f"nvFuser does not load: {type(e).__name__}: {e}"
    return f"nvFuser {nvfuser_version()} is older than thunder requires ({required_nvfuser_version()})"


def _translate_copy_to_out(computed: TensorProxy, *, out: TensorProxy, after=(), fd, lc_to_nv_map):
    from thunder.executors.nvfuserex_impl import getnv

    written = fd.ops.set(getnv(computed, fd, lc_to_nv_map))
    fd.add_output(written, alias_input=getnv(out, fd, lc_to_nv_map))
    return written


def _supports(computed: TensorProxy, *, out: TensorProxy, after=()) -> bool:
    from thunder.executors.nvfuserex_impl import are_supported_tensors

    return are_supported_tensors(computed, out)


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
    return None


NVFUSER_RULES = RegionRules(
    "nvFuser",
    in_order=False,
    blocker=nvfuser_write_blocker,
    how="in place in an nvFuser region",
    kept="`{region}` computes `{computed}` straight into `{out}`'s buffer",
)


def _register() -> None:
    # `register_supported` and `getnv` are internals of thunder's nvFuser executor (thunder 0.2.6 has no
    # public way to add an op to it); this is the only module that touches them, and it imports them only
    # where thunder itself has loaded nvFuser.
    from thunder.executors.nvfuserex_impl import ex, register_supported

    register_supported(copy_to_out_, _translate_copy_to_out, _supports)
    register_region_rules(ex, NVFUSER_RULES)


if nvfuser_inplace_available()[0]:
    _register()
