"""nvFuser support for ``copy_to_out_``: the write runs inside an nvFuser region, as an output aliasing ``out``.

``copy_to_out_(computed, out=o)`` translates to ``fd.add_output(fd.ops.set(computed), alias_input=o)``,
the form thunder's own ``prims.copy_`` takes in nvFuser: the region writes ``computed`` into ``o``'s
buffer, with no extra kernel and no extra buffer. ``after`` carries no data and is not translated.

Claiming needs nothing more than the registration: ``thunder_ext.executors.inplace_ex`` claims every
``copy_to_out_`` first (so each write always has an executor), and nvFuser's fusion pass then takes
the CUDA ones into its regions, because ``Executor.can_fuse`` looks through ``inplace_ex``'s operator
to the ``copy_to_out_`` it calls. Whether a region may keep a write is decided afterwards, on the
final trace, by the checker, by nvFuser's region rules (``transforms/regions/nvfuser.py``: what nvFuser's
alias outputs require, and what falls back to a copy: docs/gpu.md).

Where nvFuser or CUDA is missing, nothing is registered and ``nvfuser_inplace_available()`` says
why; the writes then run on the PyTorch executor.
"""

from __future__ import annotations

import importlib.util

import torch
from thunder.core.proxies import TensorProxy
from thunder.executors.nvfuserex import nvfuser_available, nvfuser_version, required_nvfuser_version

from thunder_ext.primitive import copy_to_out_

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


def _register() -> None:
    # `register_supported` and `getnv` are internals of thunder's nvFuser executor (thunder 0.2.6 has no
    # public way to add an op to it); this is the only module that touches them, and it imports them only
    # where thunder itself has loaded nvFuser.
    from thunder.executors.nvfuserex_impl import register_supported

    register_supported(copy_to_out_, _translate_copy_to_out, _supports)


if nvfuser_inplace_available()[0]:
    _register()
