"""Ops of a trace compiled as a program of their own, through the pipeline of the compilation tracing them, and
called from its trace as one op (``thunder_ext/regional/programs.py`` makes block programs with them).

- ``computation``: a computation trace of given ops, which takes given proxies (each unpacked trivially) and
  returns a given output, sharing the model trace's names (nothing either makes can collide).
- ``through_pipeline``: the compile data's ``apply_transforms_and_build_cache_entry`` (the pipeline thunder runs on
  a traced model: alias updates, the transforms, ``dce``, claiming and fusion, code generation) on it, with a
  prologue that returns its arguments and an epilogue that returns nothing. Without grad,
  ``disable_torch_autograd_support`` is set while it runs: parameters that require grad would make it split a joint
  trace that grad-off tracing never built. Under grad, thunder splits it where it takes a tensor that requires
  grad; the forward's and the backward's returns are rewritten flat (``Pipelined``), so that each is a program
  thunder built from a trace, which an op can call and the compile cache can store.
- ``operator``: an op of the compilation's ad-hoc executor (first in its executor list, so its calls are claimed
  as they are) that runs a ``CalledProgram``, with a grad transform where given, and ``called_program``, the one a
  bound symbol calls.

Written for thunder 0.2.6: the compile data's pipeline, the trace's signature, the ad-hoc executor and the call
contexts of its operators, ``disable_torch_autograd_support``, the returns of the split's forward and backward
(``split_into_forward_and_backward``) and what its backward clears. Retired by: thunder compiling a repeated module once
itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from thunder.common import CompileStats
from thunder.core import jit_ext, prims
from thunder.core.codeutils import SigInfo
from thunder.core.compile_data import get_compile_data
from thunder.core.proxies import Proxy, TensorProxy
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


@dataclass
class Pipelined:
    """What the pipeline built from a computation trace. Without a backward, ``run`` is its computation. With one,
    ``run`` is its forward, returning its outputs' leaves and then ``saved``, the tensors it saves for ``backward``;
    ``backward([list(saved), []], cotangents)`` returns ``grads``, one gradient for each argument that has one
    (each list is emptied as it is read, as thunder's backward does)."""

    run: Callable
    traces: list[TraceCtx]
    backward: Callable | None = None
    saved: tuple[TensorProxy, ...] = ()
    grads: tuple[tuple[int, TensorProxy], ...] = ()  # (the argument's position, its gradient)


class NotSplit(Exception):
    """The pipeline split the trace into a forward and a backward whose conventions a call cannot take."""


def through_pipeline(computation_trace: TraceCtx) -> Pipelined:
    """``computation_trace`` taken through the pipeline of the compilation tracing now. Where it takes a tensor that
    requires grad under grad, it must return a tuple of tensors: thunder splits it into a forward, which returns a
    dict and what it saves, and a backward; their returns are rewritten flat, as ``Pipelined`` says."""
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
    if entry.backward_fn is None:
        return Pipelined(entry.computation_fn, entry.computation_traces)
    forward, backward = entry.computation_traces[-1], entry.backward_traces[-1]
    data, (saved, other) = forward.bound_symbols[-1].args
    if other:
        raise NotSplit(f"its forward saves {len(other)} values that are not tensors")
    grads = tuple((i, g) for i, g in enumerate(backward.bound_symbols[-1].args[0]) if g is not None)
    run = _returning(forward, (*data["output"], *saved)).python_callable()
    return Pipelined(run, entry.computation_traces, _returning(backward, tuple(g for _, g in grads)).python_callable(),
                     tuple(saved), grads)  # fmt: skip


def _returning(trace: TraceCtx, returned: tuple) -> TraceCtx:
    """``trace``, returning ``returned`` instead."""
    t = from_trace(trace)
    t.bound_symbols = trace.bound_symbols[:-1] + [trace.bound_symbols[-1].from_bsym(args=(returned,))]
    return t


def operator(name: str, meta: Callable, program: CalledProgram, *, dont_dce: bool,
             grad_transform: Callable | None = None) -> Symbol:  # fmt: skip
    """An operator of the compilation's ad-hoc executor (which names each operator apart) that runs ``program``;
    tagged ``DONT_DCE`` where its effects are writes that no output shows; differentiated by ``grad_transform``
    (thunder's convention: it computes the outputs, reads their gradients with ``get_grad`` and gives its inputs'
    with ``put_grad``), where given."""
    tags = (prims.OpTags.DONT_DCE,) if dont_dce else ()
    executor = jit_ext.get_jit_ctx().ad_hoc_executor
    op = executor.register_operator(name, meta=meta, fn=program, tags=tags)
    if grad_transform is not None:
        executor.register_implementation(op, op, grad_transform=grad_transform)
    return op


def called_program(bsym: BoundSymbol) -> CalledProgram | None:
    """The program that ``bsym`` calls, if it is a call of an ``operator``."""
    ctx = bsym._call_ctx  # the operator's ``fn``, by its name (``register_operator``)
    found = next(iter(ctx.values()), None) if ctx else None
    return found if isinstance(found, CalledProgram) else None
