"""A repeated block as one op (issue 61's block program): a record's bound symbols are compiled once, through the
model's own pipeline, as a program of its own, and each call of that block is one call of it with its layer's
tensors instead of the block's ops: each replay, and the recorded call itself where the block has more candidates
than one (its ops are taken out of the trace for the call). Without grad; by default unless thunder's
torch.compile executor is among the compilation's (``block_replay.programs_wanted``).

Where a call may stand for the ops is the extension's rule (``transforms/block_calls.py``, which the compilation's
transform answers through ``ExtensionTransform.block_program_writes``); here is how the program is made and called:

- **Made.** Its computation trace takes every proxy the record's bound symbols read and do not make (the block's
  arguments, its module's tensors, anything shared), each unpacked trivially, and returns the record's output; its
  prologue returns those arguments, its epilogue nothing. The compile data's ``apply_transforms_and_build_cache_entry``
  (the pipeline thunder runs on a traced model: alias updates, the transforms, ``dce``, claiming and fusion, code
  generation) takes them through every stage and executor of the model's compilation, once. Without grad,
  ``disable_torch_autograd_support`` is set while it runs: parameters that require grad would make it split a
  joint trace that grad-off tracing never built.
- **Called.** An operator of the compilation's ad-hoc executor (first in its executor list, so the call is claimed
  as it is) runs the program's computation; its outputs are fresh proxies, as a replay's would be, or for the
  recorded call the record's own, which the rest of the trace already reads (``call_making``). Its bound
  symbol is tagged ``DONT_DCE``: its writes are effects that no output shows.
- **Inlined.** ``inlined`` gives a call's replayed bound symbols, the record's with that call's tensors, for a pass
  that puts the block's ops back where a call cannot stand for them.

The compile cache stores a program within the entry of each compilation that calls it, as a program text of its own
(``cache_entries.Program.blocks``); a loaded entry calls the program rebuilt from it. It stores each program apart
too, keyed by the block's traced ops (``ExtensionTransform.block_store``): a model of another depth has another entry,
traces the same blocks, and loads their programs instead of compiling them.

Written for thunder 0.2.6: the compile data's pipeline, the ad-hoc executor, ``disable_torch_autograd_support``.
Retired by: thunder compiling a repeated module once itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from thunder.common import CompileStats
from thunder.core import jit_ext, prims
from thunder.core.codeutils import SigInfo
from thunder.core.compile_data import get_compile_data
from thunder.core.proxies import Proxy, TensorProxy, variableify
from thunder.core.pytree import tree_flatten, tree_flatten_with_dataclass, tree_map, tree_unflatten
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, from_trace, get_tracectx, tracectx

from thunder_ext.thunder026.scope import extension_transform
from thunder_ext.thunder026.traced_call import no_traced_call


@dataclass(eq=False)
class BlockProgram:
    """One record's compiled program, and what a call of it stands for."""

    cls: str  # the block's class, as the log names it
    inputs: list[Proxy]  # the record's proxies that the program takes, in its order
    written: frozenset[int]  # positions among ``inputs`` whose storage it writes
    bsyms: list[BoundSymbol]  # the record's bound symbols, which a call stands for
    output: Any  # the record's output
    made: list[Proxy]  # what the record's bound symbols make, subsymbols' too
    run: Callable  # the compiled computation
    decisions: list  # the decisions of its writes (``InplaceTransform.decisions`` of its trace)
    seconds: float
    loaded: bool = False  # from the compile cache (``ProgramStore``), not compiled here
    operator: Symbol | None = None  # its operator on the compilation's ad-hoc executor, once called

    def __call__(self, *args):
        return self.run(*args)


class ProgramStore(Protocol):
    """Where block programs outlive their process (the compile cache's, ``compile_cache/attach.py``): each under a
    key that names everything its compilation read, the ops traced included."""

    def key(self, computation: TraceCtx) -> Any | None:
        """The key of the program compiled from ``computation`` in this compilation; None where it has none."""

    def load(self, key: Any) -> tuple[Callable, list] | None:
        """The stored program's computation and decisions."""

    def save(self, key: Any, name: str, seconds: float, run: Callable, decisions: list) -> None:
        """Stores the program ``name``, compiled in ``seconds``, under ``key``."""


def program_called(bsym: BoundSymbol) -> BlockProgram | None:
    """The block program that ``bsym`` calls, if it is a call of one."""
    ctx = bsym._call_ctx  # the operator's ``fn``, by its name (``register_operator``)
    found = next(iter(ctx.values()), None) if ctx else None
    return found if isinstance(found, BlockProgram) else None


def compiled(record: Any, inputs: list[Proxy], written: frozenset[int]) -> BlockProgram:
    """``record``'s bound symbols, which read ``inputs`` and write those at ``written``, compiled once."""
    start = time.perf_counter()
    cd, model = get_compile_data(), get_tracectx()

    def trace_of(args: list[Proxy], bsyms: list[BoundSymbol], returned: Any, name: str) -> TraceCtx:
        t = from_trace(model)  # shares the model's names: nothing either makes can collide
        t.args, t.kwargs, t._siginfo = tuple(args), {}, SigInfo.from_name_and_args(name, list(args))
        t.bound_symbols = [prims.unpack_trivial.bind(a, name=a.name, output=a) for a in args] + list(bsyms)
        with tracectx(t):
            prims.python_return(returned)
        return t

    name = f"block_{record.cls.__name__}"
    computation = trace_of(inputs, record.bsyms, record.output, name)
    transform = extension_transform()
    store = transform.block_store
    key = None if store is None else store.key(computation)
    loaded = None if key is None else store.load(key)
    if loaded is None:
        prologue = trace_of(inputs, [], (tuple(inputs), ()), "prologue")
        epilogue = trace_of([], [], None, "epilogue")
        traced, grad_support = transform.traced_blocks, cd.disable_torch_autograd_support
        # the model's traced blocks: its transform logs them once the model is traced, not here
        transform.traced_blocks, cd.disable_torch_autograd_support = None, grad_support or not cd.is_grad_enabled
        try:
            with no_traced_call():
                entry = cd.apply_transforms_and_build_cache_entry(cd, CompileStats(), {}, prologue, computation,
                                                                  epilogue)  # fmt: skip
        finally:
            transform.traced_blocks, cd.disable_torch_autograd_support = traced, grad_support
        decided = getattr(transform, "decisions", {})
        run, decisions = entry.computation_fn, next((decided[t] for t in reversed(entry.computation_traces)
                                                     if t in decided), [])  # fmt: skip
        if key is not None:
            described = ", ".join(p.type_string() for p in inputs if isinstance(p, TensorProxy))
            store.save(key, f"{name}({described})", time.perf_counter() - start, run, decisions)
    else:
        run, decisions = loaded
    return BlockProgram(record.cls.__name__, inputs, written, record.bsyms, record.output, record.made, run,
                        decisions, time.perf_counter() - start, loaded is not None)  # fmt: skip


def call(program: BlockProgram, swap: dict) -> Any:
    """Append a call of ``program`` with the tensors ``swap`` gives the record's; return its output."""
    return _operator(program)(*[swap.get(variableify(p), p) for p in program.inputs])


def call_making(program: BlockProgram, output: Any) -> BoundSymbol:
    """A call of ``program`` with the record's own tensors, bound to make ``output``, the record's: the recorded call
    itself, whose outputs the rest of the trace already reads."""
    return _operator(program).bind(*program.inputs, output=output)


def _operator(program: BlockProgram):
    """The program's operator on the compilation's ad-hoc executor (which names each operator apart), made once."""
    if program.operator is None:
        made = {variableify(p) for p in program.made}

        def meta(*args):  # fresh outputs, as a replay's are; tagged as any op's under grad-off tracing
            return tree_map(lambda x: x.replace(name=None) if isinstance(x, Proxy) and variableify(x) in made else x,
                            program.output)  # fmt: skip

        program.operator = jit_ext.get_jit_ctx().ad_hoc_executor.register_operator(
            f"block_{program.cls}", meta=meta, fn=program, tags=(prims.OpTags.DONT_DCE,)
        )
    return program.operator


def inlined(call_bsym: BoundSymbol) -> list[BoundSymbol]:
    """The record's bound symbols with the tensors of ``call_bsym``, a call of a block program, as a replay appends
    them."""
    program = program_called(call_bsym)
    swap = {variableify(p): a for p, a in zip(program.inputs, call_bsym.args)}
    recorded, _ = tree_flatten(program.output)
    called, _ = tree_flatten(call_bsym.output)
    swap.update((variableify(r), c) for r, c in zip(recorded, called) if isinstance(r, Proxy))
    return replayed(program.bsyms, program.made, swap)


def replayed(bsyms: list[BoundSymbol], made: list[Proxy], swap: dict) -> list[BoundSymbol]:
    """``bsyms`` with the proxies ``swap`` gives, and a fresh name for each other one they make, subsymbols' values
    too (executors flatten them); ``swap`` gains the fresh ones."""
    swap.update((v, p.replace(name=None)) for p in made if (v := variableify(p)) not in swap)
    return [swapped(b, swap) for b in bsyms]


def swapped(bsym: BoundSymbol, swap: dict) -> BoundSymbol:
    """``bsym`` with each proxy of ``swap`` replaced once: ``from_bsym_swap_proxies`` follows chains, and a block's
    argument is the previous block's output, a key and a value of ``swap`` at once."""

    def each(tree):
        flat, spec = tree_flatten_with_dataclass(tree)
        return tree_unflatten([swap.get(variableify(x), x) if isinstance(x, Proxy) else x for x in flat], spec)

    return bsym.from_bsym(
        args=each(bsym.args),
        kwargs=each(bsym.kwargs),
        output=each(bsym.output),
        subsymbols=[swapped(s, swap) for s in bsym.subsymbols],
    )
