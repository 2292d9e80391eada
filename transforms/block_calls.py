"""Where one call of a block program (``thunder_ext/regional/programs.py``) may stand for the block's ops in
the model's trace.

Rule: the model's passes see a call as a pure op that reads its arguments and makes new outputs. So a call stands
for the ops only where that is all the model's trace can tell of them:
- the block writes nothing but storage it made and tensors it does not take as arguments: its module's (a cache's
  buffers), or reached through an object it takes (the layer of HF's cache), and returns nothing that may share
  storage with what it takes (``block_program_writes``, asked once per record);
- in the model's trace, no op but that one call takes a tensor it writes, and the tensor is one of the trace's
  arguments (``inline_block_calls_sharing_written_state``, before any other pass reads the trace: any other call
  gets the block's ops back, as a replay appends them).
Then nothing reads a written tensor that the call could be reordered against, thunder's ``dce`` keeps the call for
its writes (``DONT_DCE``), and the prologue's check of state written and shared with the call's arguments sees the
call's writes (``block_writes``). The writes themselves are the program's own, proven by its own pipeline; each
call reports the program's decisions with its layer's tensors (``block_call_decisions``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from thunder.core.proxies import Proxy, TensorProxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx
from thunder.core.utils import consumers

from thunder_ext.regional.programs import inlined, program_called
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.op_kinds import is_copy_to_out, is_thunder_copy, thunder_inplace_write, unpacks_an_argument


def block_program_writes(bsyms: list[BoundSymbol], inputs: list[Proxy], arguments: set,
                         output: Any) -> frozenset[int] | str:  # fmt: skip
    """The positions among ``inputs`` whose storage ``bsyms`` write, where none is one of the call's ``arguments``
    (variables) and no tensor of ``output`` may share storage with an input; else why a call may not stand for them."""
    aliases = Aliases(bsyms)
    keys = [aliases.storage_key(p) if isinstance(p, TensorProxy) else None for p in inputs]
    written: set[int] = set()
    for bsym in bsyms:
        if (write := thunder_inplace_write(bsym)) is None:
            if any(is_thunder_copy(s) or is_copy_to_out(s) for s in _nested(bsym)):
                return f"its {bsym.sym.name} writes inside an op"
            continue
        hit = {i for i, key in enumerate(keys) if key == aliases.storage_key(write[1])}
        if any(variableify(inputs[i]) in arguments for i in hit):
            return "it writes into one of its arguments"
        written |= hit
    for out in tree_flatten(output)[0]:
        if isinstance(out, TensorProxy) and aliases.storage_key(out) in keys:
            return "it returns a tensor that may share storage with one it takes"
    return frozenset(written)


def _nested(bsym: BoundSymbol):
    for s in bsym.subsymbols:
        yield s
        yield from _nested(s)


def block_writes(bsym: BoundSymbol) -> list[TensorProxy]:
    """The tensors whose storage ``bsym`` writes, if it is a call of a block program."""
    program = program_called(bsym)
    return [] if program is None else [bsym.args[i] for i in sorted(program.written)]


def inline_block_calls_sharing_written_state(trace: TraceCtx) -> TraceCtx:
    """Put the block's ops back in place of each call whose written tensors another op takes, or that are no
    argument of the trace (the module's docstring gives the rule)."""
    calls = [b for b in trace.bound_symbols if program_called(b) is not None]
    if not calls:
        return trace
    takers = consumers(trace)
    arguments = {variableify(a) for a in tree_flatten((trace.args, trace.kwargs))[0] if isinstance(a, Proxy)}

    def taken_by_another_op(t: TensorProxy, call: BoundSymbol) -> bool:
        others = [b for b in takers.get(t, []) if b is not call and not unpacks_an_argument(b)]
        return others not in ([], [trace.bound_symbols[-1]])  # the return holds every argument

    def stands(call: BoundSymbol) -> bool:
        return all(variableify(t) in arguments and not taken_by_another_op(t, call) for t in block_writes(call))

    inline = [c for c in calls if not stands(c)]
    if not inline:
        return trace
    out = from_trace(trace)
    with tracectx(out):
        for bsym in trace.bound_symbols:
            out.bound_symbols.extend(inlined(bsym) if any(bsym is c for c in inline) else [bsym])
    out.set_provenance(TraceProvenance("thunder_ext: inline block calls sharing written state"))
    return out


def block_call_decisions(trace: TraceCtx) -> list:
    """The decisions of each block program's writes, once per call of it in ``trace``, with the call's tensors."""
    decisions = []
    for bsym in trace.bound_symbols:
        if (program := program_called(bsym)) is not None:
            named = {p.name: a.name for p, a in zip(program.inputs, bsym.args) if isinstance(a, Proxy)}
            decisions += [dataclasses.replace(d, out=named.get(d.out, d.out)) for d in program.decisions]
    return decisions


__all__ = [
    "block_call_decisions",
    "block_program_writes",
    "block_writes",
    "inline_block_calls_sharing_written_state",
]
