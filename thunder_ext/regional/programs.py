"""A repeated block as one op (issue 61's block program): a record's bound symbols are compiled once, through the
model's own pipeline, as a program of its own, and each call of that block is one call of it with its layer's
tensors instead of the block's ops: each replay, and the recorded call itself where the block has more candidates
than one (its ops are taken out of the trace for the call). By default unless thunder's torch.compile executor is
among the compilation's (``programs_wanted``).

Where a call may stand for the ops is the extension's rule (``transforms/block_calls.py``, which the compilation's
transform answers through ``RegionalTransform.block_program_writes``); here is how the program is made and called:

- **Made.** Its computation trace takes every proxy the record's bound symbols read and do not make (the block's
  arguments, its module's tensors, anything shared), each unpacked trivially, and returns the record's output; the
  model's pipeline takes it through every stage and executor of the model's compilation, once
  (``thunder026/trace_programs.py``).
- **Shared.** A record whose ops are another's but for their proxies' names (``ops_digest``), such as an HF layer's,
  each interpreted since it reads its ``layer_idx``, calls that one's program with its own proxies.
- **Called.** An operator of the compilation's ad-hoc executor runs the program's computation; its outputs are
  fresh proxies, as a replay's would be, or for the recorded call the record's own, which the rest of the trace
  already reads (``call_making``). Its bound symbol is tagged ``DONT_DCE``: its writes are effects that no output
  shows.
- **Differentiated.** Under grad the program returns its output's leaves (thunder splits only a trace that returns
  a tuple), and where a gradient may flow into it (``differentiable``: the replay's rule), the pipeline splits it
  into a forward, which returns what it saves too, and a backward (``trace_programs.Pipelined``). The call's
  operator then has a grad transform (thunder's autodiff calls it instead): a call of the forward's operator, the
  outputs' gradients, a call of the backward's, each input's gradient put. Only a block that writes nothing gets
  here (``replay._program``): the rules of differentiated writes (``transforms/gradients.py``) are kept on the
  model's whole trace, and a program's split would hide its writes from them.
- **Inlined.** ``inlined`` gives a call's replayed bound symbols, the record's with that call's tensors, for a pass
  that puts the block's ops back where a call cannot stand for them.

The compile cache stores a program within the entry of each compilation that calls it, as a program text of its own
(``cache_entries.Program.blocks``; a differentiated call's forward and backward, each in the trace that calls it); a
loaded entry calls the program rebuilt from it. It stores each program apart too (under grad, its forward and backward
with what they save and give), keyed by the block's traced ops, its arguments' ``requires_grad`` included
(``RegionalTransform.block_store``): a model of another depth has another entry, traces the same blocks, and loads
their programs instead of compiling them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from thunder.core import prims
from thunder.core.compile_data import get_compile_data
from thunder.core.proxies import Proxy, TensorProxy, variableify
from thunder.core.pytree import tree_flatten, tree_flatten_with_dataclass, tree_map, tree_unflatten
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, tracectx
from thunder.core.transforms import get_grad, put_grad
from thunder.executors.torch_compile import torch_compile_ex

from thunder_ext.thunder026 import trace_programs
from thunder_ext.thunder026.cache_entries import NotStorable, trace_digest
from thunder_ext.thunder026.scope import extension_transform


def programs_wanted(asked: bool | None) -> bool:
    """Whether this compilation's replays call block programs: as ``asked``; by default (None), unless thunder's
    torch.compile executor is among its executors. There each program is an Inductor region of its own, whose
    every call pays its call path (thunder's wrappers, Dynamo's frame, AOT autograd's and Inductor's: about 0.3 ms a
    layer), where the whole decode step is one region without programs: per token 1.12-1.19x
    torch.compile(dynamic)'s with programs against 0.98-1.02x without, on SmolLM2-135M's config
    (docs/benchmarks.md, 2026-12-08). thunder's default executors on a CPU make no such region."""
    if asked is not None:
        return asked
    return not any(ex.name == torch_compile_ex.name for ex in get_compile_data().executors_list)


@dataclass(eq=False)
class BlockProgram(trace_programs.CalledProgram):
    """One record's compiled program, and what a call of it stands for."""

    cls: str  # the block's class, as the log names it
    inputs: list[Proxy]  # the record's proxies that the program takes, in its order
    written: frozenset[int]  # positions among ``inputs`` whose storage it writes
    differentiable: frozenset[int]  # and those its backward gives a gradient (under grad)
    bsyms: list[BoundSymbol]  # the record's bound symbols, which a call stands for
    output: Any  # the record's output
    made: list[Proxy]  # what the record's bound symbols make, subsymbols' too
    run: Callable  # the compiled computation
    decisions: list  # the decisions of its writes (``InplaceTransform.decisions`` of its trace)
    seconds: float
    loaded: bool = False  # from the compile cache (``ProgramStore``), not compiled here
    flat: bool = False  # compiled under grad: a call returns its output's leaves, a tuple
    split: trace_programs.Pipelined | None = None  # its forward and backward, where a gradient flows through it
    operator: Symbol | None = None  # its operator on the compilation's ad-hoc executor, once called

    def __call__(self, *args):
        if self.split is not None:  # ``run`` returns what it saves too: only its forward's operator may run it
            raise RuntimeError(f"the block program of {self.cls} was called without its backward")
        return self.run(*args)


@dataclass(eq=False)
class _Half(trace_programs.CalledProgram):
    """The forward or the backward of a block program, which a differentiated call of it runs."""

    run: Callable


class ProgramStore(Protocol):
    """Where block programs outlive their process (the compile cache's, ``compile_cache/attach.py``): each under a
    key that names everything its compilation read, the ops traced included."""

    def key(self, computation: TraceCtx) -> Any | None:
        """The key of the program compiled from ``computation`` in this compilation; None where it has none."""

    def load(self, key: Any) -> tuple[trace_programs.Pipelined, list] | None:
        """The stored program (its computation, or its forward and backward) and its decisions."""

    def save(self, key: Any, name: str, seconds: float, built: trace_programs.Pipelined, decisions: list) -> None:
        """Stores the program ``name``, compiled in ``seconds``, under ``key``."""


def program_called(bsym: BoundSymbol) -> BlockProgram | None:
    """The block program that ``bsym`` calls, if it is a call of one."""
    found = trace_programs.called_program(bsym)
    return found if isinstance(found, BlockProgram) else None


def compiled(record: Any, inputs: list[Proxy], written: frozenset[int], differentiable: frozenset[int]) -> BlockProgram:
    """``record``'s bound symbols, which read ``inputs`` and write those at ``written``, compiled once; under grad,
    with a backward that gives the gradients of those at ``differentiable`` (``NotSplit`` where it cannot)."""
    start = time.perf_counter()
    name = f"block_{record.cls.__name__}"
    # under grad, thunder splits a trace that returns a tuple of tensors: it returns the output's leaves
    flat = get_compile_data().is_grad_enabled
    leaves = tree_flatten(record.output)[0]
    if flat and not all(isinstance(x, TensorProxy) for x in leaves):
        raise trace_programs.NotSplit("it returns a value that is not a tensor")
    with tracectx(TraceCtx()):  # copies under the same names: thunder's split gives gradients to those requiring it
        swap = {variableify(inputs[i]): inputs[i].replace(requires_grad=True) for i in differentiable}
    computation = trace_programs.computation([swap.get(variableify(p), p) for p in inputs],
                                             [swapped(b, swap) for b in record.bsyms],
                                             tuple(leaves) if flat else record.output, name)  # fmt: skip
    transform = extension_transform()
    store = transform.block_store
    key = None if store is None else store.key(computation)
    loaded = None if key is None else store.load(key)
    if loaded is None:
        # the model's traced blocks: its transform logs them once the model is traced, not the program's
        traced, transform.traced_blocks = transform.traced_blocks, None
        try:
            built = trace_programs.through_pipeline(computation)
        finally:
            transform.traced_blocks = traced
        decided = getattr(transform, "decisions", {})
        decisions = next((decided[t] for t in reversed(built.traces) if t in decided), [])
        if key is not None:
            described = ", ".join(p.type_string() for p in inputs if isinstance(p, TensorProxy))
            store.save(key, f"{name}({described})", time.perf_counter() - start, built, decisions)
    else:
        built, decisions = loaded
    split = built if built.backward is not None else None
    return BlockProgram(record.cls.__name__, inputs, written, differentiable, record.bsyms, record.output, record.made,
                        built.run, decisions, time.perf_counter() - start, loaded is not None, flat, split)  # fmt: skip


def ops_digest(inputs: list[Proxy], bsyms: list[BoundSymbol], made: list[Proxy], output: Any) -> str | None:
    """A digest of what ``bsyms`` compute from ``inputs`` (``trace_digest``'s), each proxy named by its place among
    ``inputs`` or ``made``: equal for two records whose ops differ only in their proxies' names, so that one program
    stands for both (an HF decoder layer reads its ``layer_idx``, so each layer is a record of its own). None where
    the digest cannot name what they hold."""
    trace = TraceCtx()
    with tracectx(trace):
        names = {variableify(p): p.replace(name=f"_in{i}") for i, p in enumerate(inputs)}
        names.update((variableify(p), p.replace(name=f"_made{i}")) for i, p in enumerate(made))
        trace.bound_symbols = [swapped(b, names) for b in bsyms]
        prims.python_return(tree_map(lambda x: names.get(variableify(x), x) if isinstance(x, Proxy) else x, output))
    try:
        return trace_digest(trace)
    except NotStorable:
        return None


def call(program: BlockProgram, inputs: list[Proxy], swap: dict) -> Any:
    """Append a call of ``program`` for a record whose ``inputs`` are the program's, with the tensors ``swap`` gives
    them; return its output."""
    output = _operator(program)(*[swap.get(variableify(p), p) for p in inputs])
    return tree_unflatten(list(output), tree_flatten(program.output)[1]) if program.flat else output


def call_making(program: BlockProgram, inputs: list[Proxy], output: Any) -> BoundSymbol:
    """A call of ``program`` with a record's own ``inputs``, bound to make ``output``, the record's: the recorded call
    itself, whose outputs the rest of the trace already reads."""
    return _operator(program).bind(*inputs, output=tuple(tree_flatten(output)[0]) if program.flat else output)


def _operator(program: BlockProgram):
    """The program's operator on the compilation's ad-hoc executor (which names each operator apart), made once."""
    if program.operator is None:
        made = {variableify(p) for p in program.made}

        def meta(*args):  # fresh outputs, as a replay's are; tagged as any op's under grad-off tracing
            fresh = tree_map(lambda x: x.replace(name=None) if isinstance(x, Proxy) and variableify(x) in made else x,
                             program.output)  # fmt: skip
            return tuple(tree_flatten(fresh)[0]) if program.flat else fresh

        differentiated = None if program.split is None else _grad_transform(program)
        program.operator = trace_programs.operator(f"block_{program.cls}", meta, program, dont_dce=True,
                                                   grad_transform=differentiated)  # fmt: skip
    return program.operator


def _grad_transform(program: BlockProgram) -> Callable:
    """A call's forward and backward, as thunder's autodiff wants them: the program's forward, which returns its
    outputs and what it saves; the gradients of its outputs; its backward, which gives its inputs' gradients."""
    split = program.split
    leaves = tree_flatten(program.output)[0]

    def fresh(proxies):
        return tuple(p.replace(name=None) for p in proxies)

    forward = trace_programs.operator(f"block_{program.cls}_forward", lambda *args: fresh((*leaves, *split.saved)),
                                      _Half(split.run), dont_dce=False)  # fmt: skip
    backward = trace_programs.operator(f"block_{program.cls}_backward", lambda saved, cotangents: fresh(
        g for _, g in split.grads), _Half(split.backward), dont_dce=False)  # fmt: skip

    def grad_transform(*args):
        computed = forward(*args)
        outputs = computed[: len(leaves)]
        grads = backward([list(computed[len(leaves) :]), []], [get_grad(o) for o in outputs])
        for (i, _), g in zip(split.grads, grads, strict=True):
            put_grad(args[i], g)
        return outputs

    return grad_transform


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
