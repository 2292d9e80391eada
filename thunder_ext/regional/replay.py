"""Trace a repeated block once: the first call of each kind of block is interpreted and recorded, each later one
replayed from the record with its own tensors, without interpreting its Python again.

thunder 0.2.6's interpreter runs the Python of every call, so a model of 30 identical blocks (litgpt's ``Block``,
an HF decoder layer) costs 30 interpretations of the same code, 94% of a compilation. The interpreter hands each
module call to the compilation's transform (``thunder026/module_calls.py``); ``RegionalTransform`` hands here the
calls of the candidate blocks (``_blocks``: the elements of the jitted module's ``nn.ModuleList``s, and the repeated
blocks of its ``nn.Sequential``s):

- **Record.** The first call of a kind is interpreted while the interpreter's detectors watch it. The record keeps
  the bound symbols the call appended, the access path of each tensor of the module they read (``keys``), the
  prologue checks the call added on the module's values, what it read outside the module, and whether it did
  anything a replay would not do again.
- **Replay.** A later call whose key matches a replayable record (``keys``' rules) gets its own tensors by running
  their access paths again through the interpreter (so the prologue unpacks and checks them as when interpreted);
  the prologue's checks of the record's numbers and strings, read on its own module, become Python guards
  (``python_guards.replay_values``: one check for all, where thunder's prologue makes an unpacking and a check of
  each); and it gets the recorded bound symbols again, each tensor of the record swapped for this call's, each
  value the call makes for a fresh one, or one call of the record's block program (``programs``). Source lines
  are the record's, which are the same lines.
- **Select.** An HF decoder layer reads its ``layer_idx`` only to index the cache's list of layers (the cache's
  ``update``). The record follows each int it reads from its module to its uses (``module_calls.Selection``); where
  one only indexed a list from outside, a layer of another index replays the record: its index is read on its own
  module (the prologue checks it), the list indexed with it, and the record's reads from the item made again there
  (its tensors this layer's, its numbers and its class the record's, or ``Differs``: the layer is another record).
- **Interpret.** Anything else (no candidate, no matching record, a record that cannot be replayed, at most four
  records of a class) is interpreted as today. The reason is kept (``report.TracedBlocks``). Its ops still become
  a call of a program where one was compiled for the same ops (``programs.ops_digest``): layers whose index is read
  otherwise (``x * (self.index + 1)``) are records of their own, and those whose ops are equal call one program.

A record cannot be replayed where its call had a side effect other than a tensor write (``module_calls.Watch``:
litgpt's ``KVCache`` converting its buffers, ``self.k = self.k.to(dtype)``, is an attribute assigned on an object
it did not make), nor where it changed grad or autocast, ran a random op, or passed a collection to an op.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from thunder.core import dtypes
from thunder.core.compile_data import get_cache_option, get_compile_data
from thunder.core.options import CACHE_OPTIONS
from thunder.core.prims import OpTags, PrimIDs
from thunder.core.proxies import CollectionProxy, NumberProxy, Proxy, TensorProxy, variableify
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import get_tracectx

from thunder_ext.regional import programs
from thunder_ext.regional.keys import ModuleKey, arguments_key, leaf_key, module_key, snapshot
from thunder_ext.regional.report import FIRST, BlockCall, TracedBlocks
from thunder_ext.thunder026.module_calls import (
    Differs,
    ModuleCall,
    NotReplayable,
    Selection,
    Step,
    Watch,
    Watched,
    access_path,
    global_hooks_present,
    interpretation_state,
    is_plain,
)
from thunder_ext.thunder026.trace_programs import NotSplit

if TYPE_CHECKING:
    from thunder_ext.regional.transform import RegionalTransform

MAX_RECORDS_PER_CLASS = 4


@dataclass
class _Record:
    """What one interpreted call did, to replay it; see the module's docstring."""

    cls: type
    module: ModuleKey
    arguments: tuple  # the call's ``arguments_key``
    argument_leaves: list  # and its arguments' leaves
    grad_and_autocast: tuple
    watch: Watch  # what the call read and did, noted while it was interpreted
    # once recorded
    bsyms: list[BoundSymbol] = field(default_factory=list)
    module_tensors: list[tuple[Any, tuple[Step, ...]]] = field(default_factory=list)  # (Variable, access path)
    checked_values: list[tuple[Step, ...]] = field(default_factory=list)  # access paths of the prologue's checks
    python_checks: list = field(default_factory=list)  # and of the Python values ``python_guards`` checks
    made: list[Proxy] = field(default_factory=list)  # what the call's bound symbols make, subsymbols' too
    output: Any = None
    program: programs.BlockProgram | None = None  # compiled at its first call, where asked and allowed
    digest: str | None = None  # of its ops (``programs.ops_digest``), where it has a program
    no_program: str | None = None  # why not
    inputs: list[Proxy] = field(default_factory=list)  # what its bound symbols read and do not make: the program's
    # the module's ints that only index a list from outside (``module_calls.Selection``): each one's access path, and
    # what they selected; a replay gives them another value
    indices: dict[tuple[str, str], tuple[Step, ...]] = field(default_factory=dict)
    selections: list[Selection] = field(default_factory=list)
    kept: set = field(default_factory=set)  # the variables of the tensors it reads from outside, not selected

    @property
    def argument_variables(self) -> set:
        """The variables of the proxies among the call's arguments: the call's own, not shared."""
        return {variableify(x) for x in self.argument_leaves if isinstance(x, Proxy)}

    @property
    def not_replayable(self) -> str | None:
        return self.watch.refused

    def refuse(self, reason: str) -> None:
        self.watch.refuse(reason)


class _Compilation:
    """The replay state of one interpretation."""

    def __init__(self, transform: RegionalTransform) -> None:
        self.transform = transform
        self.traced = transform.traced_blocks = TracedBlocks()
        self.candidates: dict[int, str] = {}  # the candidate blocks (``_blocks``), by id, with their names
        self.classes: Counter = Counter()  # how many candidates of each class
        root = get_compile_data().fn
        if isinstance(root, torch.nn.Module):
            for name, block in _blocks(root):
                self.candidates[id(block)] = name
                self.classes[type(block)] += 1
        self.records: dict[type, list[_Record]] = {}
        self.programs: dict[tuple, programs.BlockProgram] = {}  # by the ops they stand for (``programs.ops_digest``)
        self.gradients = _GradientReach()


class _GradientReach:
    """Which tensors of the model's trace a gradient may flow into, found forward over its bound symbols as the
    interpreter appends them: a tensor no op made (a parameter, a buffer, an argument: the prologue's) where it
    requires grad; one an op made where a tensor the op reads may (thunder marks none it makes as requiring grad).
    Once an op writes in place with a tensor read that may, every floating tensor may: its destination and the views
    sharing its storage carry a gradient then, which this does not follow."""

    def __init__(self) -> None:
        self.made: set = set()
        self.flowing: set = set()
        self.everywhere = False
        self.seen = 0  # how many of the trace's bound symbols were found, and the last of them (to see a cut)
        self.last: BoundSymbol | None = None

    def may_flow_into(self, p: TensorProxy) -> bool:
        bsyms = get_tracectx().bound_symbols
        if self.seen and (len(bsyms) < self.seen or bsyms[self.seen - 1] is not self.last):
            self.__init__()  # the trace was cut (a recorded call's ops became one call of its program): found again
        for b in bsyms[self.seen :]:
            flows = any(self._flows(a) for a in b.flat_proxy_args if isinstance(a, TensorProxy))
            self.everywhere |= flows and any(_writes(s) for s in _with_subsymbols([b]))
            outs = {variableify(o) for o in b.flat_proxy_outs}
            self.made |= outs
            if flows:
                self.flowing |= outs
        self.seen, self.last = len(bsyms), (bsyms[-1] if bsyms else None)
        return dtypes.is_inexact_dtype(p.dtype) and (self.everywhere or self._flows(p))

    def _flows(self, p: TensorProxy) -> bool:
        v = variableify(p)
        return v in self.flowing if v in self.made else p.requires_grad


def _writes(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` itself writes a tensor in place: thunder's in-place ops end in its ``copy_``; others (the
    extension's ``tensor_scatter_``) carry thunder's in-place tag."""
    return bsym.sym.id == PrimIDs.COPY_ or OpTags.IN_PLACE in (bsym.sym.tags or ())


def _blocks(root: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """``(name, module)`` of each candidate block of ``root``: every element of an ``nn.ModuleList``, and each child
    of an ``nn.Sequential`` whose class repeats among its siblings and which holds modules of its own (a ViT's or a
    ResNet stage's blocks; not the ``Linear``s and activations of an MLP, one op each, which a replay or a program
    call would only slow)."""
    for name, container in root.named_modules():
        children = list(container.named_children())
        if isinstance(container, torch.nn.Sequential):
            repeats = Counter(type(c) for _, c in children)
            children = [(n, c) for n, c in children if repeats[type(c)] > 1 and next(c.children(), None) is not None]
        elif not isinstance(container, torch.nn.ModuleList):
            continue
        yield from ((f"{name}.{n}" if name else n, c) for n, c in children)


def trace_module_call(transform: RegionalTransform, call: ModuleCall) -> Any:
    """A module call in a compilation that replays blocks: a candidate's traced once per kind, any other
    interpreted."""
    state = interpretation_state("regional.replay", lambda: _Compilation(transform))
    module = call.module
    if id(module) not in state.candidates:
        return call.interpret()
    started = time.perf_counter()
    how, reason, result = _trace_block(state, call)
    state.traced.calls.append(BlockCall(state.candidates[id(module)], type(module).__name__, how, reason,
                                        time.perf_counter() - started))  # fmt: skip
    return result


def _trace_block(state: _Compilation, call: ModuleCall) -> tuple[str, str, Any]:
    """``(how, why, result)`` of a call of a candidate block: replayed from a record that matches it, or interpreted
    (recorded where a record of its kind may still be made)."""
    try:
        if get_cache_option() not in (CACHE_OPTIONS.CONSTANT_VALUES, CACHE_OPTIONS.NO_CACHING):
            raise NotReplayable("a cache option other than constant values")  # symbolic values: not tried
        if global_hooks_present():
            raise NotReplayable("global module hooks")
        if len(get_tracectx().scopes) != 1:
            raise NotReplayable("a call inside a nested trace scope")
        module = module_key(call.module)
        arguments, leaves = arguments_key(*call.arguments())
    except NotReplayable as e:
        return "interpreted", str(e), call.interpret()
    records = state.records.get(type(call.module), [])
    why = FIRST
    for record in records:
        if record.not_replayable is not None:
            why = f"the recorded {record.cls.__name__} {record.not_replayable}"
            continue
        why = _mismatch(record, module, arguments)
        if why is None:
            try:
                return "replayed", "", _replay(state, record, call, leaves)
            except Differs as e:  # raised before anything is put in the trace
                why = str(e)
            except NotReplayable as e:  # the same
                record.refuse(str(e))
                why = str(e)
    if records and why == FIRST:
        why = "no record matches"
    if len(records) >= MAX_RECORDS_PER_CLASS:  # not kept, but its ops may call a program of the same ops
        return "interpreted", why, _record(state, call, module, arguments, leaves, kept=False)
    reason = FIRST if not records else f"{why}, recorded"
    return "interpreted", reason, _record(state, call, module, arguments, leaves)


# ---- replay keys ------------------------------------------------------------------------------------------------


def _grad_and_autocast() -> tuple:
    return getattr(get_compile_data(), "is_grad_enabled", None), torch.is_autocast_enabled()


def _mismatch(record: _Record, module: ModuleKey, arguments: tuple) -> str | None:
    """Why a call of ``module`` with ``arguments`` may not replay ``record``; None where it may."""
    if record.arguments != arguments:
        return "arguments of other metadata or values"
    if record.module.structure != module.structure:
        return "a module of another structure"
    if record.grad_and_autocast != _grad_and_autocast():
        return "another grad or autocast state"
    watch = record.watch
    for key, value in module.values.items():
        if record.module.values.get(key) != value and (key in watch.reads or key[0] in watch.dict_reads):
            if key in record.indices and key[0] not in watch.dict_reads and value[:2] == ("plain", int):
                continue  # an index, which only selects: the replay selects again
            path, attribute = key
            return f"attribute {path + '.' if path else ''}{attribute} differs and is read"
    for kind, name, then, now in watch.outside_now():
        if snapshot(now) != snapshot(then):
            return f"{kind} {name!r} changed since the recorded call"
    return None


# ---- record -----------------------------------------------------------------------------------------------------

_RANDOM_PRIMS = frozenset(
    getattr(PrimIDs, n)
    for n in ("UNIFORM", "UNIFORM_PHILOX", "RANDN", "GET_AND_UPDATE_RNG_STATE", "GET_RNG_STATE", "SET_RNG_STATE")
    if hasattr(PrimIDs, n)
)


def _with_subsymbols(bsyms: list[BoundSymbol]):
    for b in bsyms:
        yield b
        yield from _with_subsymbols(b.subsymbols)


def _finish(record: _Record, call: ModuleCall, watched: Watched) -> None:
    """Read what the interpreted call did into ``record``; raises ``NotReplayable`` for what a replay cannot do."""
    record.bsyms = watched.bsyms
    arguments = record.argument_variables
    made, read = set(), []
    for b in _with_subsymbols(record.bsyms):
        if b.sym.id in _RANDOM_PRIMS:
            raise NotReplayable("runs a random op")
        for p in b.flat_proxy_args:
            if isinstance(p, CollectionProxy):
                raise NotReplayable("passes a collection to an op")
            read.append(p)
        for p in b.flat_proxy_outs:
            if (v := variableify(p)) not in made and v not in arguments:
                if not isinstance(p, (TensorProxy, NumberProxy)):
                    raise NotReplayable(f"makes a {type(p).__name__}")
                made.add(v)
                record.made.append(p)
    known: set[tuple[Step, ...]] = set()
    module: set = set()
    seen = made | arguments
    for p in read:  # made here or an argument: the call's own; read from nowhere in the module: shared, kept
        if (v := variableify(p)) not in seen:
            seen.add(v)
            if (steps := call.path_of(p)) is not None:
                record.module_tensors.append((v, steps))
                module.add(v)
                known.add(steps)
    # the prologue's checks of the module's values (``block_idx == 0``): made again on the replayed module
    for p in watched.checked:
        if (steps := call.path_of(p)) is not None and steps not in known:
            known.add(steps)
            record.checked_values.append(steps)
    _note_indices(record, call, own=arguments | module, outside=seen - made - arguments - module)
    for x in tree_flatten(watched.output)[0]:
        if isinstance(x, Proxy) and not isinstance(x, (TensorProxy, NumberProxy)):
            raise NotReplayable(f"returns a {type(x).__name__}")
        if isinstance(x, torch.Tensor):
            raise NotReplayable("returns a tensor thunder did not proxy")
    record.output = watched.output


def _note_indices(record: _Record, call: ModuleCall, *, own: set, outside: set) -> None:
    """The module's ints the call used only as the index of a list from outside (``Watch.selecting``) whose
    selections a replay can make again: the list read from an object the replay key compares by identity (an
    argument's attribute, a global) and passed to nothing that reads its items unseen; what each selected reached
    no other way (``own``: the variables of the call's arguments and module tensors; ``outside``: of the rest its
    ops read)."""
    watch = record.watch
    then = [value for _, _, value in watch.outside_reads.values()]
    elsewhere = own | watch.reached_tensors
    for key in watch.selecting:
        mine = [s for s in watch.selections if s.index == key]
        if any(id(s.container) in watch.passed or not any(s.container.value is x for x in then) for s in mine):
            continue
        if any(isinstance(s.value, TensorProxy) and variableify(s.value) in elsewhere for s in mine):
            continue
        if any(id(w) in watch.reached for w, s in watch.holders.values() if s.index == key):
            continue
        wrapper = next(w for w, k in watch.indices.values() if k == key)
        try:
            path = access_path(wrapper.provenance, call.wrapped.provenance)
        except NotReplayable:
            continue
        if path is not None:
            record.indices[key] = path
            record.selections += mine
    selected = {variableify(s.value) for s in record.selections if isinstance(s.value, TensorProxy)}
    record.kept = outside - selected


def _record(state: _Compilation, call: ModuleCall, module: ModuleKey, arguments: tuple, leaves: list, *,
            kept: bool = True) -> Any:  # fmt: skip
    """Interpret the call while the detectors watch it; where ``kept``, keep the record (replayable or not) for
    later calls."""
    record = _Record(type(call.module), module, arguments, leaves, _grad_and_autocast(), Watch(module.paths))
    watched = call.interpret_watched(record.watch)
    if watched.raised:
        return watched.result
    if kept:
        state.records.setdefault(record.cls, []).append(record)
    if record.grad_and_autocast != _grad_and_autocast():
        record.refuse("changes grad or autocast")
    if record.not_replayable is None:
        try:
            _finish(record, call, watched)
            record.python_checks = call.python_checks(watched.python_checks_since)
        except NotReplayable as e:
            record.refuse(str(e))
    if record.not_replayable is None and state.classes[record.cls] > 1:
        _call_program_instead(state, record, watched.start, compile=kept)
    return watched.result


# ---- replay -----------------------------------------------------------------------------------------------------


def _replay(state: _Compilation, record: _Record, call: ModuleCall, leaves: list) -> Any:
    swap = {variableify(a): b for a, b in zip(record.argument_leaves, leaves) if isinstance(a, Proxy)}
    for v, steps in record.module_tensors:  # this module's own tensors, unpacked and checked by the prologue
        if not isinstance(p := call.reach(steps), Proxy):
            raise NotReplayable(f"the access path {steps} gives no tensor on this module")
        swap[v] = p
    _select_again(record, call, swap)
    if not call.check_again(record.checked_values, record.python_checks):  # and of its own values
        raise NotReplayable("the block has no access path for the checks of its Python values")
    if (program := _program(state, record, swap)) is not None:
        output = programs.call(program, record.inputs, swap)
    else:
        get_tracectx().peek_scope().extend(programs.replayed(record.bsyms, record.made, swap))
        output = tree_map(lambda x: swap.get(variableify(x), x) if isinstance(x, Proxy) else x, record.output)
    return call.returning(output)


def _select_again(record: _Record, call: ModuleCall, swap: dict) -> None:
    """Make the record's selections with this module's indices: a tensor selected is this call's (of the record's
    metadata, and no other tensor of the call), a plain value the same, an item of the same class, an attribute
    read from it the same object; raises ``Differs`` where not."""
    selected: dict = {}
    for selection in record.selections:
        now, then = call.select(selection, record.indices[selection.index]), selection.value
        if isinstance(then, TensorProxy):
            if not isinstance(now, TensorProxy) or leaf_key(now) != leaf_key(then):
                raise Differs(f"it selects a tensor of other metadata by its {selection.index[1]}")
            if selected.setdefault(variableify(then), now) is not now:
                raise Differs(f"it selects two tensors where the record selected one by its {selection.index[1]}")
        elif not (snapshot(now) == snapshot(then) if is_plain(then) else
                  type(now) is type(then) if not selection.steps else now is then):  # fmt: skip
            raise Differs(f"what it selects by its {selection.index[1]} differs")
    others = {variableify(p) for p in swap.values()} | record.kept
    if len({variableify(p) for p in selected.values()} | others) != len(selected) + len(others):
        raise Differs("a tensor it selects is another of its tensors")
    swap.update(selected)


def _call_program_instead(state: _Compilation, record: _Record, start: int, *, compile: bool = True) -> None:
    """The recorded call's ops, from ``start`` in the trace, become one call of the record's program, where one may
    stand for them, so that each layer is one call (the replays' too); the call's outputs are the record's, which
    the interpreter holds. Asked only where the block has more than one candidate: one call has nothing to share.
    ``compile``: False where only a program compiled already for the same ops may be called."""
    if (program := _program(state, record, {}, compile=compile)) is not None:
        trace = get_tracectx()
        del trace.bound_symbols[start:]
        trace.bound_symbols.append(programs.call_making(program, record.inputs, record.output))


def _program(state: _Compilation, record: _Record, swap: dict, *, compile: bool = True) -> programs.BlockProgram | None:
    """The record's block program, where this call may call it: compiled at its first call, or another record's
    of the same ops (``programs.ops_digest``), or one of those ops that gives the gradients of more of this call's
    tensors; else None, the reason kept for the log."""
    transform = state.transform
    if not programs.programs_wanted(transform.block_programs):
        return None
    if record.program is None and record.no_program is None:
        record.inputs = inputs = _read_not_made(record.bsyms)
        written = transform.block_program_writes(record.bsyms, inputs, record.argument_variables, record.output)
        if isinstance(written, str):
            record.no_program = written
        elif written and get_compile_data().is_grad_enabled:
            record.no_program = "grad is on and it writes a tensor"
        else:
            record.digest = programs.ops_digest(inputs, record.bsyms, record.made, record.output)
            record.program, record.no_program = _program_of(state, record, written, _differentiable(state, inputs),
                                                             compile=compile)  # fmt: skip
    program, why = record.program, record.no_program
    if program is not None:
        args = [swap.get(variableify(p), p) for p in record.inputs]
        variables = [variableify(p) for p in args]
        if any(variables.count(variables[i]) > 1 for i in program.written):
            program, why = None, "a tensor it writes is another of its arguments too"
        elif not (flowing := _differentiable(state, args)) <= program.differentiable:
            # a gradient flows into a tensor where none flowed at the record's call (LoRA's first layer, whose input
            # comes from a frozen embedding): the program of the same ops that gives both
            program, why = _program_of(state, record, program.written, program.differentiable | flowing)
    if program is None:
        state.traced.not_called[why] += 1
    else:
        state.traced.called[program] += 1
    return program


def _program_of(state: _Compilation, record: _Record, written: frozenset[int], differentiable: frozenset[int], *,
                compile: bool = True) -> tuple[programs.BlockProgram | None, str | None]:  # fmt: skip
    """The program of the record's ops that writes its inputs at ``written`` and gives the gradients of those at
    ``differentiable``: another call's of the same ops, or compiled (``compile``); else None and why."""
    ops = (record.digest if record.digest is not None else ("record", id(record)), written, differentiable)
    if ops in state.programs:
        return state.programs[ops], None
    if not compile:
        return None, f"more than {MAX_RECORDS_PER_CLASS} records and no program of its ops"
    try:
        program = state.programs[ops] = programs.compiled(record, record.inputs, written, differentiable)
    except NotSplit as e:
        return None, f"grad is on and {e}"
    return program, None


def _differentiable(state: _Compilation, inputs: list[Proxy]) -> frozenset[int]:
    """Under grad, the positions among a block's ``inputs`` that a gradient may flow into (``_GradientReach``): its
    module's tensors that require grad, and a floating tensor from outside that depends on one (litgpt's ``x``, not
    its ``cos`` and ``sin``, which only select from buffers). A call whose gradients are not among its program's
    does not call it."""
    if not get_compile_data().is_grad_enabled:
        return frozenset()
    return frozenset(i for i, p in enumerate(inputs) if isinstance(p, TensorProxy) and state.gradients.may_flow_into(p))


def _read_not_made(bsyms: list[BoundSymbol]) -> list[Proxy]:
    """The proxies ``bsyms`` read before or without making them, each once, in the order first read."""
    made, read = set(), {}
    for b in bsyms:
        for p in b.flat_proxy_args:
            if (v := variableify(p)) not in made:
                read.setdefault(v, p)
        made.update(variableify(p) for p in b.flat_proxy_outs)
    return list(read.values())
