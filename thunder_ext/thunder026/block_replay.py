"""Trace a repeated block once: the first call of each kind of block is interpreted and recorded, each later one
replayed from the record with its own tensors, without interpreting its Python again.

thunder 0.2.6's interpreter runs the Python of every call, so a model of 30 identical blocks (litgpt's ``Block``,
an HF decoder layer) costs 30 interpretations of the same code, 94% of a compilation. Here a lookaside on
``torch.nn.Module._call_impl`` takes the calls of the elements of the jitted module's ``nn.ModuleList``s:

- **Record.** The first call of a kind is interpreted while the detectors below watch it. The record keeps the
  bound symbols the call appended, the access path of each tensor of the module they read (``replay_keys``), the
  prologue checks the call added on the module's values, what it read outside the module, and whether it did
  anything a replay would not do again.
- **Replay.** A later call whose key matches a replayable record (``replay_keys``' rules) gets its own tensors by
  running their access paths again through the interpreter's own ``getattr`` and subscript (so the prologue unpacks
  and checks them as when interpreted); the prologue's checks of the record's numbers and strings, read on its own
  module, become Python guards (``python_guards.replay_values``: one check for all, where thunder's prologue makes
  an unpacking and a check of each); and it gets the recorded bound symbols again, each tensor of the record swapped
  for this call's, each value the call makes for a fresh one. Source lines are the record's, which are the same
  lines.
- **Interpret.** Anything else (no candidate, no matching record, a record that cannot be replayed, at most four
  records of a class) is interpreted as today: a copy of ``_call_impl`` is interpreted, which the lookaside does
  not see. The reason is kept (``TracedBlocks``).

A record cannot be replayed where its call had a side effect other than a tensor write: an attribute assignment on
an object it did not make (litgpt's ``KVCache`` converting its buffers, ``self.k = self.k.to(dtype)``), a global
written or deleted, an existing list or dict changed, a module's member dicts changed, grad or autocast changed, a
random op, or a trace scope left open; nor where it passed a module of the block, or an object from outside with
attributes, to a C function other than a few known to read none (``vars``, ``operator.attrgetter`` and
``object.__getattribute__`` read attributes that thunder's interpreter does not see read).

Only the extension's compilations that ask for it replay (``ExtensionTransform.replay_blocks``); everywhere else the
lookaside interprets ``_call_impl`` as thunder does, and the detectors do nothing.

Written for thunder 0.2.6: its lookaside table, interpreter callbacks and opcode handlers, and the ``JitCtx`` that
holds a compilation's constraints. Retired by: thunder tracing a repeated module once itself.
"""

from __future__ import annotations

import operator
import time
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from thunder.core import interpreter, jit_ext
from thunder.core.compile_data import get_cache_option, get_compile_data
from thunder.core.interpreter import (
    INTERPRETER_CALLBACKS,
    INTERPRETER_SIGNALS,
    ProvenanceRecord,
    PseudoInst,
    WrappedValue,
    _interpret_call,
    get_interpreterruntimectx,
    unwrap,
    wrap,
    wrap_const,
)
from thunder.core.options import CACHE_OPTIONS
from thunder.core.prims import PrimIDs
from thunder.core.proxies import CollectionProxy, NumberProxy, Proxy, TensorProxy, variableify
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import get_tracectx
from thunder.executors.torch_compile import torch_compile_ex

from thunder_ext.thunder026 import block_programs, python_guards
from thunder_ext.thunder026.replay_keys import (
    ModuleKey,
    NotReplayable,
    Step,
    access_path,
    arguments_key,
    global_hooks_present,
    is_plain,
    module_key,
    snapshot,
)
from thunder_ext.thunder026.scope import extension_transform

MAX_RECORDS_PER_CLASS = 4


@dataclass(frozen=True)
class BlockCall:
    """One call of a repeated block in a compilation: how it was traced, why, and in how many seconds."""

    path: str  # the block, as the jitted module names it (``transformer.h.3``)
    cls: str
    how: str  # "interpreted" or "replayed"
    reason: str  # why it was interpreted ("" where it was replayed)
    seconds: float


@dataclass
class TracedBlocks:
    """The repeated blocks' calls of one compilation, in order."""

    calls: list[BlockCall] = field(default_factory=list)
    called: Counter = field(default_factory=Counter)  # block program -> calls of it
    not_called: Counter = field(default_factory=Counter)  # why a recorded block's call called none -> how many

    def count(self, how: str) -> int:
        return sum(c.how == how for c in self.calls)

    def seconds(self, how: str) -> float:
        return sum(c.seconds for c in self.calls if c.how == how)

    def summary(self) -> str:
        """One line for the compile log: ``30 calls of Block: 1 interpreted (6.9 s), 29 replayed (3.1 s)``, then why
        each interpreted call after the first of its kind was interpreted, and where block programs are asked for,
        each one's compilation and calls (``compiled Block once (0.3 s), called 30 times``; ``loaded``, from the
        compile cache) and why any call of a recorded block called none."""
        kinds = ", ".join(f"{n} of {cls}" for cls, n in Counter(c.cls for c in self.calls).items())
        counts = [f"{self.count(how)} {how} ({self.seconds(how):.1f} s)" for how in ("interpreted", "replayed")]
        line = f"{len(self.calls)} calls of repeated blocks ({kinds}): {', '.join(counts)}"
        why = Counter(c.reason for c in self.calls if c.how == "interpreted" and c.reason != FIRST)
        line += "".join(f"; {n} interpreted: {reason}" for reason, n in why.items())
        line += "".join(f"; {'loaded' if p.loaded else 'compiled'} {p.cls} once ({p.seconds:.1f} s), called {n} "
                        "times" for p, n in self.called.items())  # fmt: skip
        return line + "".join(f"; {n} without a block program: {why}" for why, n in self.not_called.items())


FIRST = "the first call of its kind, recorded"


@dataclass
class _Record:
    """What one interpreted call did, to replay it; see the module's docstring."""

    cls: type
    module: ModuleKey
    arguments: tuple
    grad_and_autocast: tuple
    root: ProvenanceRecord  # the recorded module's provenance, where its access paths start
    # while recording
    reads: set[tuple[str, str]] = field(default_factory=set)  # (relative path, attribute) read by getattr/hasattr
    dict_reads: set[str] = field(default_factory=set)  # relative paths whose __dict__ the user's code read
    outside_reads: dict[tuple, tuple] = field(default_factory=dict)  # attribute, global and item reads -> snapshot
    member_dicts: set[int] = field(default_factory=set)  # ids of the subtree's member dicts
    made_here: set[int] = field(default_factory=set)  # ids of the WrappedValues the call made
    not_replayable: str | None = None
    # once recorded
    bsyms: list[BoundSymbol] = field(default_factory=list)
    argument_leaves: list = field(default_factory=list)
    module_tensors: list[tuple[Any, tuple[Step, ...]]] = field(default_factory=list)  # (Variable, access path)
    checked_values: list[tuple[Step, ...]] = field(default_factory=list)  # access paths of the prologue's checks
    python_checks: list = field(default_factory=list)  # and of the Python values ``python_guards`` checks
    made: list[Proxy] = field(default_factory=list)  # what the call's bound symbols make, subsymbols' too
    output: Any = None
    program: block_programs.BlockProgram | None = None  # compiled at its first call, where asked and allowed
    no_program: str | None = None  # why not

    def refuse(self, reason: str) -> None:
        if self.not_replayable is None:
            self.not_replayable = reason


class _Compilation:
    """The replay state of one interpretation (kept on thunder's ``JitCtx``, which lives as long as it)."""

    def __init__(self, root: object, traced: TracedBlocks) -> None:
        self.traced = traced
        # candidates: the elements of the jitted module's ModuleLists, by id, with their names
        self.candidates: dict[int, str] = {}
        self.classes: Counter = Counter()  # how many candidates of each class
        if isinstance(root, torch.nn.Module):
            for name, m in root.named_modules():
                if isinstance(m, torch.nn.ModuleList):
                    self.candidates.update((id(c), f"{name}.{i}" if name else str(i)) for i, c in enumerate(m))
                    self.classes.update(type(c) for c in m)
        self.records: dict[type, list[_Record]] = {}
        self.recording: _Record | None = None  # no nesting: a call inside a recorded one is part of it


_STATE = "_thunder_ext_block_replay"


def _compilation() -> _Compilation | None:
    """The state of the interpretation running now, where it replays blocks; else None."""
    try:
        ctx = jit_ext.get_jit_ctx()
    except LookupError:
        return None
    state = getattr(ctx, _STATE, None)
    if state is None:
        transform = extension_transform()
        if transform is None or not transform.replay_blocks:
            return None
        state = _Compilation(get_compile_data().fn, TracedBlocks())
        transform.traced_blocks = state.traced
        setattr(ctx, _STATE, state)
    return state


def _recording() -> _Record | None:
    try:
        state = getattr(jit_ext.get_jit_ctx(), _STATE, None)
    except LookupError:
        return None
    return None if state is None else state.recording


# ---- replay keys ------------------------------------------------------------------------------------------------

_MISSING = object()


def _grad_and_autocast() -> tuple:
    return getattr(get_compile_data(), "is_grad_enabled", None), torch.is_autocast_enabled()


def _global(globals_: dict, name: str) -> object:
    if name in globals_:
        return globals_[name]
    builtins = globals_.get("__builtins__", {})
    return getattr(builtins, name, _MISSING) if isinstance(builtins, types.ModuleType) else builtins.get(name, _MISSING)


def _attribute_now(wrapped: WrappedValue, name: str) -> object:
    """An attribute of an object from outside the call, as the interpreter sees it now: it holds the traced code's
    writes to such objects until the epilogue, so the object itself still has the old value."""
    attribute = wrapped.attribute_wrappers.get(name)
    return unwrap(attribute) if attribute is not None else unwrap(wrapped).__dict__.get(name, _MISSING)


def _item_now(wrapped: WrappedValue, key: object) -> object:
    try:
        return unwrap(wrapped)[key]
    except (KeyError, IndexError):
        return _MISSING


_NOW: dict[str, Callable[[Any, Any], object]] = {"attribute": _attribute_now, "global": _global, "item": _item_now}


def _mismatch(record: _Record, module: ModuleKey, arguments: tuple) -> str | None:
    """Why a call of ``module`` with ``arguments`` may not replay ``record``; None where it may."""
    if record.arguments != arguments:
        return "arguments of other metadata or values"
    if record.module.structure != module.structure:
        return "a module of another structure"
    if record.grad_and_autocast != _grad_and_autocast():
        return "another grad or autocast state"
    for key, value in module.values.items():
        if record.module.values.get(key) != value and (key in record.reads or key[0] in record.dict_reads):
            path, attribute = key
            return f"attribute {path + '.' if path else ''}{attribute} differs and is read"
    for (kind, _, name), (holder, key, before) in record.outside_reads.items():
        if snapshot(_NOW[kind](holder, key)) != before:
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


def _finish(record: _Record, constraints: list, bsyms: list[BoundSymbol], args, kwargs, result) -> None:
    """Read what the interpreted call did into ``record``; raises ``NotReplayable`` for what a replay cannot do."""
    record.bsyms = bsyms
    _, record.argument_leaves = arguments_key(args, kwargs)
    arguments = {variableify(x) for x in record.argument_leaves if isinstance(x, Proxy)}
    made, read = set(), []
    for b in _with_subsymbols(bsyms):
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
    seen = made | arguments
    for p in read:
        v, history = variableify(p), getattr(p, "history", None)
        if v in seen or not isinstance(history, ProvenanceRecord):
            continue  # made here, an argument, or no provenance: shared by every call, kept as it is
        seen.add(v)
        if (steps := access_path(history, record.root)) is not None:
            record.module_tensors.append((v, steps))
            known.add(steps)
    # the prologue's checks of the module's values (``block_idx == 0``): made again on the replayed module
    for constraint in constraints:
        for a in constraint[1:]:
            if isinstance(a, Proxy) and isinstance(getattr(a, "history", None), ProvenanceRecord):
                if (steps := access_path(a.history, record.root)) is not None and steps not in known:
                    known.add(steps)
                    record.checked_values.append(steps)
    for x in tree_flatten(unwrap(result))[0]:
        if isinstance(x, Proxy) and not isinstance(x, (TensorProxy, NumberProxy)):
            raise NotReplayable(f"returns a {type(x).__name__}")
        if isinstance(x, torch.Tensor):
            raise NotReplayable("returns a tensor thunder did not proxy")
    record.output = unwrap(result)


def _record(state: _Compilation, wrapped_self: WrappedValue, args, kwargs, module: ModuleKey, arguments: tuple):
    """Interpret the call while the detectors watch it; keep the record (replayable or not) for later calls."""
    ctx, trace, self_ = jit_ext.get_jit_ctx(), get_tracectx(), unwrap(wrapped_self)
    record = _Record(type(self_), module, arguments, _grad_and_autocast(), wrapped_self.provenance)
    for m in self_.modules():
        record.member_dicts.update((id(m._parameters), id(m._buffers), id(m._modules), id(m.__dict__)))
    member_writes = sum(map(len, ctx._additional_outputs.values()))
    start, checks, python_checks = len(trace.bound_symbols), len(ctx._constraints), python_guards.mark()
    state.recording = record
    try:
        result = _interpret(wrapped_self, args, kwargs)
    finally:
        state.recording = None
    if result is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        return result
    state.records.setdefault(record.cls, []).append(record)
    if len(trace.scopes) != 1:
        record.refuse("leaves a trace scope open")
    if sum(map(len, ctx._additional_outputs.values())) != member_writes:
        record.refuse("assigns a module's parameter, buffer or submodule")
    if record.grad_and_autocast != _grad_and_autocast():
        record.refuse("changes grad or autocast")
    if record.not_replayable is None:
        try:
            uargs, ukwargs = tuple(map(unwrap, args)), {k: unwrap(v) for k, v in kwargs.items()}
            _finish(record, ctx._constraints[checks:], trace.bound_symbols[start:], uargs, ukwargs, result)
            record.python_checks = python_guards.relative(record.root, python_checks, access_path)
        except NotReplayable as e:
            record.refuse(str(e))
    if record.not_replayable is None and state.classes[record.cls] > 1:
        _call_program_instead(record, trace, start)
    return result


# ---- replay -----------------------------------------------------------------------------------------------------


def _run_path(reached: dict[tuple[Step, ...], WrappedValue], steps: tuple[Step, ...]) -> WrappedValue:
    """``steps`` run on another module through the interpreter, so that what it makes (the proxy, its provenance,
    the prologue's unpacking and checks) is what the module's own code would have made. ``reached`` holds what the
    module's paths reached so far (``()``: the module), each prefix run once: a block's tensors share most of theirs
    (``_modules``, ``attn``...)."""
    known = max((k for k in range(len(steps) + 1) if steps[:k] in reached), default=0)
    at = reached[steps[:known]]
    for k in range(known, len(steps)):
        kind, key = steps[k]
        # a plain dict's item (a module's ``_modules``, ``_parameters``, ``_buffers``): the interpreter would run
        # ``operator.getitem`` and ``__getitem__`` as two Python frames to reach this same lookaside
        read = getattr if kind == "attr" else dict.__getitem__ if type(unwrap(at)) is dict else operator.getitem
        at = _interpret_call(read, at, wrap_const(key))
        if at is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
            raise NotReplayable(f"the access path {steps} fails on this module")
        reached[steps[: k + 1]] = at
    return at


def _replay(record: _Record, wrapped_self: WrappedValue, leaves: list) -> WrappedValue:
    swap = {variableify(a): b for a, b in zip(record.argument_leaves, leaves) if isinstance(a, Proxy)}
    reached = {(): wrapped_self}
    for v, steps in record.module_tensors:  # this module's own tensors, unpacked and checked by the prologue
        if not isinstance(p := unwrap(_run_path(reached, steps)), Proxy):
            raise NotReplayable(f"the access path {steps} gives no tensor on this module")
        swap[v] = p
    for steps in python_guards.replay_values(wrapped_self, record.checked_values):  # and of its own values
        _run_path(reached, steps)
    if not python_guards.replay(wrapped_self, record.python_checks):
        raise NotReplayable("the block has no access path for the checks of its Python values")
    if (program := _program(record, swap)) is not None:
        output = block_programs.call(program, swap)
    else:
        get_tracectx().peek_scope().extend(block_programs.replayed(record.bsyms, record.made, swap))
        output = tree_map(lambda x: swap.get(variableify(x), x) if isinstance(x, Proxy) else x, record.output)
    return wrap(output, provenance=ProvenanceRecord(PseudoInst.LOOKASIDE, inputs=[wrapped_self.provenance]))


def _call_program_instead(record: _Record, trace, start: int) -> None:
    """The recorded call's ops, from ``start`` in ``trace``, become one call of the record's program, where one may
    stand for them, so that each layer is one call (the replays' too); the call's outputs are the record's, which
    the interpreter holds. Asked only where the block has more than one candidate: one call has nothing to share."""
    if (program := _program(record, {})) is not None:
        del trace.bound_symbols[start:]
        trace.bound_symbols.append(block_programs.call_making(program, record.output))


def programs_wanted(asked: bool | None) -> bool:
    """Whether this compilation's replays call block programs: as ``asked``; by default (None), unless thunder's
    torch.compile executor is among its executors. Inductor fuses across a block's boundaries, which a program's
    call cuts: per token 1.17x torch.compile(dynamic)'s with programs against 1.02x without, on SmolLM2-135M's
    config (docs/benchmarks.md, 2026-12-06); thunder's default executors on a CPU fuse nothing there."""
    if asked is not None:
        return asked
    return not any(ex.name == torch_compile_ex.name for ex in get_compile_data().executors_list)


def _program(record: _Record, swap: dict) -> block_programs.BlockProgram | None:
    """The record's block program, compiled at its first call, where this call may call it; else None, the reason
    kept for the log."""
    transform = extension_transform()
    if not programs_wanted(transform.block_programs):
        return None
    if record.program is None and record.no_program is None:
        if get_compile_data().is_grad_enabled:
            record.no_program = "grad is on (a block program's backward is not built)"
        else:
            inputs = _read_not_made(record.bsyms)
            module = {v for v, _ in record.module_tensors}
            written = transform.block_program_writes(record.bsyms, inputs, module, record.output)
            if isinstance(written, str):
                record.no_program = written
            else:
                record.program = block_programs.compiled(record, inputs, written)
    program, why = record.program, record.no_program
    if program is not None:
        args = [variableify(swap.get(variableify(p), p)) for p in program.inputs]
        if any(args.count(args[i]) > 1 for i in program.written):
            program, why = None, "a tensor it writes is another of its arguments too"
    if program is None:
        transform.traced_blocks.not_called[why] += 1
    else:
        transform.traced_blocks.called[program] += 1
    return program


def _read_not_made(bsyms: list[BoundSymbol]) -> list[Proxy]:
    """The proxies ``bsyms`` read before or without making them, each once, in the order first read."""
    made, read = set(), {}
    for b in bsyms:
        for p in b.flat_proxy_args:
            if (v := variableify(p)) not in made:
                read.setdefault(v, p)
        made.update(variableify(p) for p in b.flat_proxy_outs)
    return list(read.values())


# ---- the lookaside ----------------------------------------------------------------------------------------------

# _call_impl as another function object of the same code: interpreting it is interpreting _call_impl, which the
# lookaside (keyed by the original) does not see
_call_impl = torch.nn.Module._call_impl
_interpreted_call_impl = types.FunctionType(
    _call_impl.__code__, _call_impl.__globals__, _call_impl.__name__, _call_impl.__defaults__, _call_impl.__closure__
)
_interpreted_call_impl.__kwdefaults__ = _call_impl.__kwdefaults__
_interpreted_call_impl.__qualname__ = _call_impl.__qualname__


def _interpret(wrapped_self: WrappedValue, args, kwargs):
    return _interpret_call(_interpreted_call_impl, wrapped_self, *args, **kwargs)


def _call_impl_lookaside(wrapped_self: WrappedValue, *args, **kwargs):
    state = _compilation()
    if state is None or state.recording is not None or id(unwrap(wrapped_self)) not in state.candidates:
        return _interpret(wrapped_self, args, kwargs)
    started = time.perf_counter()
    how, reason, result = _trace_block(state, wrapped_self, args, kwargs)
    module = unwrap(wrapped_self)
    call = BlockCall(state.candidates[id(module)], type(module).__name__, how, reason, time.perf_counter() - started)
    state.traced.calls.append(call)
    return result


def _trace_block(state: _Compilation, wrapped_self: WrappedValue, args, kwargs) -> tuple[str, str, Any]:
    """``(how, why, result)`` of a call of a candidate block: replayed from a record that matches it, or interpreted
    (recorded where a record of its kind may still be made)."""
    trace = get_tracectx()
    try:
        if get_cache_option() not in (CACHE_OPTIONS.CONSTANT_VALUES, CACHE_OPTIONS.NO_CACHING):
            raise NotReplayable("a cache option other than constant values")  # symbolic values: not tried
        if global_hooks_present():
            raise NotReplayable("global module hooks")
        if len(trace.scopes) != 1:
            raise NotReplayable("a call inside a nested trace scope")
        module = module_key(unwrap(wrapped_self))
        arguments, leaves = arguments_key(tuple(map(unwrap, args)), {k: unwrap(v) for k, v in kwargs.items()})
    except NotReplayable as e:
        return "interpreted", str(e), _interpret(wrapped_self, args, kwargs)
    records = state.records.get(type(unwrap(wrapped_self)), [])
    why = FIRST
    for record in records:
        if record.not_replayable is not None:
            why = f"the recorded {record.cls.__name__} {record.not_replayable}"
            continue
        why = _mismatch(record, module, arguments)
        if why is None:
            try:
                return "replayed", "", _replay(record, wrapped_self, leaves)
            except NotReplayable as e:  # raised before anything is put in the trace
                record.refuse(str(e))
                why = str(e)
    if records and why == FIRST:
        why = "no record matches"
    if len(records) >= MAX_RECORDS_PER_CLASS:
        return "interpreted", why, _interpret(wrapped_self, args, kwargs)
    reason = FIRST if not records else f"{why}, recorded"
    return "interpreted", reason, _record(state, wrapped_self, args, kwargs, module, arguments)


# ---- what the recorded call reads and writes --------------------------------------------------------------------


def _user_reads_dict() -> bool:
    """Whether the code being interpreted reads ``<obj>.__dict__`` itself, not the interpreter's own attribute
    lookup nor ``nn.Module.__getattr__``, which read the member dicts through it."""
    frame = get_interpreterruntimectx().peek_frame_stack()
    if frame is None or frame.code.co_filename == torch.nn.modules.module.__file__:
        return False
    inst = frame.inst
    return inst is not None and inst.opname in ("LOAD_ATTR", "LOAD_METHOD") and inst.argval == "__dict__"


def _note_read(obj: WrappedValue, name: WrappedValue, value: object) -> None:
    record = _recording()
    if record is None:
        return
    held, attribute = unwrap(obj), unwrap(name)
    path = record.module.paths.get(id(held))
    if path is not None:
        if attribute != "__dict__":
            record.reads.add((path, attribute))
        elif _user_reads_dict():
            record.dict_reads.add(path)
        return
    # another object (a shared config): its instance attributes are checked again before each replay
    if isinstance(held, (Proxy, torch.Tensor, type, interpreter.ThunderInterpreterObject)):
        return
    if not isinstance(value, WrappedValue) or _made_by_the_call(record, obj) or not isinstance(attribute, str):
        return
    holder_dict = getattr(held, "__dict__", None)
    dunder = attribute.startswith("__") and attribute.endswith("__")
    if isinstance(holder_dict, dict) and not dunder and (attribute in holder_dict or not callable(value.value)):
        key = ("attribute", id(held), attribute)
        record.outside_reads.setdefault(key, (obj, attribute, snapshot(_attribute_now(obj, attribute))))


def _made_by_the_call(record: _Record, wrapped: object) -> bool:
    """Whether the recorded call made this object itself, so that changing it is no side effect."""
    if not isinstance(wrapped, WrappedValue) or id(wrapped) not in record.made_here:
        return False
    return wrapped.provenance.inst not in (
        PseudoInst.LOAD_ATTR, PseudoInst.BINARY_SUBSCR, PseudoInst.INPUT_ARGS, PseudoInst.INPUT_KWARGS,
        PseudoInst.INPUT_FN, PseudoInst.OPAQUE, PseudoInst.LOOKASIDE,
    )  # fmt: skip


def _reading(lookaside: Callable) -> Callable:
    def read(obj, name, *rest):
        value = lookaside(obj, name, *rest)
        _note_read(obj, name, value)
        return value

    return read


def _assigning(lookaside: Callable) -> Callable:
    def assign(obj, name, value):
        if (record := _recording()) is not None:
            made = jit_ext.is_created_during_tracing(obj.provenance) and id(obj) in record.made_here
            if not made and type(unwrap(obj)) not in jit_ext._TORCH_DYNAMIC_TYPES:
                record.refuse(f"assigns the attribute {unwrap(name)!r} of an object it did not make")
        return lookaside(obj, name, value)

    return assign


def _refusing(what: str) -> Callable[[Callable], Callable]:
    def wrap_handler(handler: Callable) -> Callable:
        def handle(inst, /, **kwargs):
            if (record := _recording()) is not None:
                record.refuse(what)
            return handler(inst, **kwargs)

        return handle

    return wrap_handler


def _changing(method: str) -> Callable[[Callable], Callable]:
    def wrap_lookaside(lookaside: Callable) -> Callable:
        def change(obj, *args, **kwargs):
            if (record := _recording()) is not None and not _made_by_the_call(record, obj):
                record.refuse(f"changes a {method.split('.')[0]} it did not make ({method})")
            return lookaside(obj, *args, **kwargs)

        return change

    return wrap_lookaside


def _item_reading(lookaside: Callable) -> Callable:
    def read(obj, key, *rest):
        if (record := _recording()) is not None and not _made_by_the_call(record, obj):
            held, k = unwrap(obj), unwrap(key)
            if id(held) not in record.member_dicts and is_plain(k):
                record.outside_reads.setdefault(("item", id(held), k), (obj, k, snapshot(_item_now(obj, k))))
        return lookaside(obj, key, *rest)

    return read


# opaque callables that read no attribute of their arguments: making an object, binding a function to one, its type
_READ_NO_ATTRIBUTES = frozenset(
    map(id, (object.__new__, object.__init__, types.FunctionType.__get__, types.MethodDescriptorType.__get__,
             types.WrapperDescriptorType.__get__, callable, id, type, isinstance, issubclass))
)  # fmt: skip


def _seeing_opaque_calls(lookaside: Callable) -> Callable:
    """thunder runs a C function (``vars``, ``operator.attrgetter``, ``object.__getattribute__``) without seeing what
    it reads: a record whose call passes such a function a module of the block or an object from outside it with
    attributes cannot be replayed, since what the function read is not known to be the same on another call."""

    def find(fn, *args, **kwargs):
        found = lookaside(fn, *args, **kwargs)
        if found is None and (record := _recording()) is not None and id(fn) not in _READ_NO_ATTRIBUTES:
            if interpreter.is_opaque(fn):
                made = 1 if getattr(fn, "__name__", None) == "__init__" else 0  # the object an __init__ makes
                for a in (*args[made:], *kwargs.values()):
                    if _has_attributes_to_read(record, a):
                        name = getattr(fn, "__qualname__", type(fn).__name__)
                        record.refuse(f"passes a {type(unwrap(a)).__name__} to {name}, whose reads thunder cannot see")
        return found

    return find


def _has_attributes_to_read(record: _Record, wrapped: object) -> bool:
    held = unwrap(wrapped)
    if id(held) in record.module.paths:
        return True
    if not isinstance(getattr(held, "__dict__", None), dict) or _made_by_the_call(record, wrapped):
        return False
    return not isinstance(held, (type, types.ModuleType, types.FunctionType, types.MethodType, Proxy, torch.Tensor))


def _noting_made(callback: Callable) -> Callable:
    def wrap_callback(value):
        if (record := _recording()) is not None:
            # a constant wrapped now may be an object that existed before: only empty new containers count as made
            held = value.value
            if value.provenance.inst is not PseudoInst.CONSTANT or (type(held) in (list, dict) and not held):
                record.made_here.add(id(value))
        return callback(value)

    return wrap_callback


def _noting_globals(callback: Callable) -> Callable:
    def read_global(value, name):
        if (record := _recording()) is not None:
            frame = get_interpreterruntimectx().peek_frame_stack()
            globals_ = unwrap(frame.globals) if frame is not None else None
            if isinstance(globals_, dict):
                key = ("global", id(globals_), name)
                record.outside_reads.setdefault(key, (globals_, name, snapshot(_global(globals_, name))))
        return callback(value, name)

    return read_global


_CONTAINER_CHANGES = {
    list: ("append", "extend", "insert", "pop", "remove", "clear", "reverse", "sort", "__setitem__", "__delitem__",
           "__iadd__", "__imul__"),
    dict: ("__setitem__", "__delitem__", "pop", "popitem", "clear", "update", "setdefault", "__ior__"),
}  # fmt: skip
_GLOBAL_CHANGES = ("STORE_GLOBAL", "DELETE_GLOBAL", "DELETE_ATTR", "STORE_NAME", "DELETE_NAME")


def _wrap_entry(table: dict, key: object, wrapper: Callable[[Callable], Callable]) -> None:
    if key in table:
        table[key] = wrapper(table[key])


def install() -> None:
    """Put the lookaside and the detectors into thunder's tables (``adapt_thunder`` calls it once)."""
    lookasides = jit_ext._general_jit_lookaside_map
    lookasides[torch.nn.Module._call_impl] = _call_impl_lookaside
    for read in (getattr, hasattr):
        _wrap_entry(lookasides, read, _reading)
    for assign in (setattr, object.__setattr__):
        _wrap_entry(lookasides, assign, _assigning)
    for opname in _GLOBAL_CHANGES:
        _wrap_entry(interpreter._default_opcode_handler_map, opname, _refusing(f"runs {opname}"))
    tracking = interpreter._default_provenance_tracking_lookaside_map
    for read in (dict.__getitem__, dict.get, list.__getitem__):
        _wrap_entry(tracking, read, _item_reading)
    for container, methods in _CONTAINER_CHANGES.items():
        for method in methods:
            fn, name = getattr(container, method), f"{container.__name__}.{method}"
            _wrap_entry(lookasides if fn in lookasides else tracking, fn, _changing(name))
    jit_ext.general_jit_lookaside = _seeing_opaque_calls(jit_ext.general_jit_lookaside)  # read when a jit begins
    callbacks = jit_ext.general_jit_callbacks
    _wrap_entry(callbacks, INTERPRETER_CALLBACKS.WRAP_CALLBACK, _noting_made)
    _wrap_entry(callbacks, INTERPRETER_CALLBACKS.GLOBAL_CALLBACK, _noting_globals)
