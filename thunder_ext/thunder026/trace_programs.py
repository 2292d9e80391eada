"""Ops of a trace compiled as a program of their own, through the pipeline of the compilation tracing them, and
called from its trace as one op (``thunder_ext/regional/programs.py`` makes block programs with them).

- ``computation``: a computation trace of given ops, which takes given proxies (each unpacked trivially) and
  returns a given output, sharing the model trace's names (nothing either makes can collide).
- ``through_pipeline``: the compile data's ``apply_transforms_and_build_cache_entry`` (the pipeline thunder runs on
  a traced model: alias updates, the transforms, ``dce``, claiming and fusion, code generation) on it, with a
  prologue that returns its arguments and an epilogue that returns nothing. Without grad,
  ``disable_torch_autograd_support`` is set while it runs: parameters that require grad would make it split a joint
  trace that grad-off tracing never built.
- ``operator``: an op of the compilation's ad-hoc executor (first in its executor list, so its calls are claimed
  as they are) that runs a ``CalledProgram``, and ``called_program``, the one a bound symbol calls.

Written for thunder 0.2.6: the compile data's pipeline, the trace's signature, the ad-hoc executor and the call
contexts of its operators, ``disable_torch_autograd_support``. Retired by: thunder compiling a repeated module once
itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from thunder.common import CompileStats
from thunder.core import jit_ext, prims
from thunder.core.codeutils import SigInfo
from thunder.core.compile_data import get_compile_data
from thunder.core.proxies import Proxy
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, from_trace, get_tracectx, tracectx

from thunder_ext.thunder026.traced_call import no_traced_call


class CalledProgram:
    """What an ``operator`` runs: a program thunder built (the compile cache stores it whole, within the entry of
    each program that calls it: ``cache_entries``)."""

    run: Callable  # the compiled computation

    def __call__(self, *args):
        return self.run(*args)


def computation(args: list[Proxy], bsyms: list[BoundSymbol], returned: Any, name: str) -> TraceCtx:
    """A trace named ``name`` of ``bsyms``, which takes ``args`` and returns ``returned``."""
    t = from_trace(get_tracectx())  # shares the model's names: nothing either makes can collide
    t.args, t.kwargs, t._siginfo = tuple(args), {}, SigInfo.from_name_and_args(name, list(args))
    t.bound_symbols = [prims.unpack_trivial.bind(a, name=a.name, output=a) for a in args] + list(bsyms)
    with tracectx(t):
        prims.python_return(returned)
    return t


def through_pipeline(computation_trace: TraceCtx) -> tuple[Callable, list[TraceCtx]]:
    """``computation_trace`` taken through the pipeline of the compilation tracing now: its computation function
    and its traces, the last executed."""
    cd = get_compile_data()
    args = list(computation_trace.args)
    prologue = computation(args, [], (tuple(args), ()), "prologue")
    epilogue = computation([], [], None, "epilogue")
    grad_support = cd.disable_torch_autograd_support
    cd.disable_torch_autograd_support = grad_support or not cd.is_grad_enabled
    try:
        with no_traced_call():
            entry = cd.apply_transforms_and_build_cache_entry(cd, CompileStats(), {}, prologue, computation_trace,
                                                              epilogue)  # fmt: skip
    finally:
        cd.disable_torch_autograd_support = grad_support
    return entry.computation_fn, entry.computation_traces


def operator(name: str, meta: Callable, program: CalledProgram, *, dont_dce: bool) -> Symbol:
    """An operator of the compilation's ad-hoc executor (which names each operator apart) that runs ``program``;
    tagged ``DONT_DCE`` where its effects are writes that no output shows."""
    tags = (prims.OpTags.DONT_DCE,) if dont_dce else ()
    return jit_ext.get_jit_ctx().ad_hoc_executor.register_operator(name, meta=meta, fn=program, tags=tags)


def called_program(bsym: BoundSymbol) -> CalledProgram | None:
    """The program that ``bsym`` calls, if it is a call of an ``operator``."""
    ctx = bsym._call_ctx  # the operator's ``fn``, by its name (``register_operator``)
    found = next(iter(ctx.values()), None) if ctx else None
    return found if isinstance(found, CalledProgram) else None
