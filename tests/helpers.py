"""Run a program under eager PyTorch and under thunder_ext.jit on equal inputs and compare everything."""

from __future__ import annotations

import torch
import thunder
from torch.testing import assert_close

import thunder_ext
from thunder_ext.transforms.aliasing import is_copy_to_out


def clone_args(args):
    """Clones that keep the aliasing between arguments (a tensor and a view of it stay base and view)."""
    storages: dict[int, torch.UntypedStorage] = {}
    out = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        key = a.untyped_storage().data_ptr()
        if key not in storages:
            storages[key] = a.untyped_storage().clone()
        clone = torch.empty(0, dtype=a.dtype, device=a.device)
        out.append(clone.set_(storages[key], a.storage_offset(), a.shape, a.stride()))
    return out


def assert_matches_eager(fn, *args, jit=thunder_ext.jit, **jit_kwargs):
    """Outputs and every argument after the call match eager; returns the jitted function."""
    eager_args, jit_args = clone_args(args), clone_args(args)
    expected = fn(*eager_args)
    jfn = jit(fn, **jit_kwargs)
    actual = jfn(*jit_args)
    assert_close(actual, expected)
    for i, (a, e) in enumerate(zip(jit_args, eager_args)):
        assert_close(a, e, msg=lambda m: f"argument {i} differs after the call: {m}")
    return jfn


def writes_in(trace) -> list:
    return [b for b in trace.bound_symbols if is_copy_to_out(b)]


def functionalized_trace(jfn):
    """The computation trace right after the functionalization pass."""
    return next(t for t in thunder.last_traces(jfn) if "functionalize writes" in str(t.get_provenance()))

