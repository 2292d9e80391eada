"""Bound symbols traced from code that torch.fx generated name the user's line behind it.

Rule: in a trace of an FX ``GraphModule`` (what the torch.compile entry points hand thunder), every bound
symbol whose source is a line of the module's generated code (``<eval_with_key>.N``) names instead the
innermost frame of the stack Dynamo recorded for that line's node (``node.meta["stack_trace"]``), the
user's line of the op. A trace of user code is left as it is.

The trace the rule forbids, from ``k.index_copy_(2, pos, nk)`` at line 3 of ``model.py``::

    # <eval_with_key>.2:5:     index_copy_ = l_k_.index_copy_(2, l_pos_, l_nk_);  l_pos_ = l_nk_ = ...
    t15 = ltorch.index_copy(t14, 2, pos, nk)

With the rule it reads ``# model.py:3: k.index_copy_(2, pos, nk)``, so the decisions and ``thunder.last_traces``
name the line that ``thunder_ext.jit`` names for the same function.

A second pass, ``name_lines_inside_writes``, runs before the fusion passes: each write's line goes onto the
``copy_to_out_`` inside it too, since a fusion pass that flattens an op into its subsymbols (nvFuser) keeps only
those, and a decision names a write by its line.
"""

from __future__ import annotations

import re

import torch
from thunder.core.codeutils import Positions
from thunder.core.compile_data import get_compile_data
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from thunder_ext.executors.torch_inplace import plain_copy_to_out
from thunder_ext.transforms.op_kinds import located_at

# one frame of a formatted stack, as Python's traceback module writes it
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in ')


def user_lines(module: torch.fx.GraphModule) -> dict[int, tuple[str, Positions]]:
    """The user's file and line behind each line of ``module``'s generated code that has a node with a stack."""
    # torch 2.9's GraphModule keeps the node of each line of its code as an index, counted from the def
    # (``_lineno_map``, what Dynamo reads to carry a node's meta over)
    first, nodes = type(module).forward.__code__.co_firstlineno, list(module.graph.nodes)
    lines = {}
    for offset, index in (module._lineno_map or {}).items():
        frames = list(_FRAME.finditer(nodes[index].meta.get("stack_trace") or "")) if index is not None else []
        if frames:
            line = int(frames[-1]["line"])
            lines[first + offset] = frames[-1]["file"], Positions(line, line, None, None)
    return lines


def name_user_lines(trace: TraceCtx) -> TraceCtx:
    """Relocate the bound symbols of a trace of FX-generated code onto the user's lines (see the module's rule)."""
    module = getattr(get_compile_data(), "fn", None)
    if not isinstance(module, torch.fx.GraphModule):
        return trace
    generated, lines = type(module).forward.__code__.co_filename, user_lines(module)

    def relocate(bsym: BoundSymbol) -> BoundSymbol:
        subsymbols = [relocate(s) for s in bsym.subsymbols]
        lineno = getattr(bsym.source_positions, "lineno", None)
        user = lines.get(lineno) if bsym.source_filename == generated else None
        location = {"source_filename": user[0], "source_positions": user[1]} if user else {}
        return bsym.from_bsym(subsymbols=subsymbols, **location)

    new_trace = from_trace(trace)
    new_trace.bound_symbols = [relocate(b) for b in trace.bound_symbols]
    new_trace.set_provenance(TraceProvenance("thunder_ext: the user's lines behind FX-generated code"))
    return new_trace


def name_lines_inside_writes(trace: TraceCtx) -> TraceCtx:
    """``trace`` with each write's user line on the ``copy_to_out_`` it calls too (see the module's docstring)."""
    lined = from_trace(trace)
    lined.bound_symbols = [
        b.from_bsym(subsymbols=[located_at(s, b) for s in b.subsymbols]) if b.sym is plain_copy_to_out else b
        for b in trace.bound_symbols
    ]
    return lined
