"""The interpreter's calls of modules, handed to the compilation's transform, and what an interpreted call did.

thunder 0.2.6's interpreter runs the Python of every module call; the extension traces a repeated block once
(``thunder_ext/regional/``). What that needs of the interpreter is here:

- **The hand-over.** A lookaside on ``torch.nn.Module._call_impl`` gives each call, as a ``ModuleCall``, to
  ``ExtensionTransform.trace_module_call`` of the compilation tracing it; everywhere else (another compilation, a
  call inside a watched one) ``_call_impl`` is interpreted as thunder does: a copy of it, which the lookaside does
  not see; in the extension's compilations, a call where no hook is set runs its ``forward`` (``interpret``).
- **A call interpreted while watched** (``ModuleCall.interpret_watched``): the bound symbols and prologue checks it
  added, and a ``Watch`` of what it read outside its arguments (attributes of its module subtree, attributes,
  globals and items from outside, each with what it read) and of what it did that tracing it again would not do
  again (an attribute assigned on an object it did not make, a global written, an existing list or dict changed,
  a module's member dicts changed, a trace scope left open, a module or an object with attributes passed to a C
  function other than a few known to read none: ``vars``, ``operator.attrgetter`` and ``object.__getattribute__``
  read attributes that the interpreter does not see read).
- **An int of the module followed to its uses** (``follow_indices``): moved, indexing a list from outside (a
  ``Selection``), or used; and an item it selected followed the same way.
- **Another call made from a watched one's facts**: a tensor's access path from the module (``path_of``: constant
  attribute loads and subscripts, from the provenance thunder keeps), run again on another module through the
  interpreter's own ``getattr`` and subscript (``reach``, so the prologue unpacks and checks what it reaches as
  when interpreted), the prologue's checks made again there, and an output returned as the call's.

Written for thunder 0.2.6: its lookaside table, interpreter callbacks and opcode handlers, ``ProvenanceRecord``,
and the ``JitCtx`` that holds a compilation's constraints. Retired by: thunder tracing a repeated module once
itself.
"""

from __future__ import annotations

import enum
import functools
import operator
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from thunder.core import interpreter, jit_ext
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
from thunder.core.proxies import Proxy, TensorProxy, variableify
from thunder.core.trace import get_tracectx

from thunder_ext.thunder026 import python_guards
from thunder_ext.thunder026.scope import compiling_with_extension, extension_transform

Step = tuple[str, Any]  # ("attr", name) or ("item", key)
_MISSING = object()


class NotReplayable(Exception):
    """Why a call, or a record of one, cannot be traced again from what it did: the call is then interpreted."""


class Differs(NotReplayable):
    """Why a call may not replay a record that others still may (what it selects differs from the record's)."""


def is_plain(v: Any) -> bool:
    """Whether ``v`` is an immutable value, compared by value (anything else is compared by identity)."""
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes, torch.dtype, torch.device, enum.Enum)):
        return True
    return type(v) in (tuple, frozenset) and all(is_plain(x) for x in v)


@dataclass
class Selection:
    """A value a watched call reached by indexing a list from outside its subtree with an int of one of its modules
    (HF's ``past_key_values.layers[self.layer_idx].keys``): the index, the list, the attributes read from the item
    (none: the item itself), and the value read then. A replay with another index reads it again by that path."""

    index: tuple[str, str]  # the module's attribute: (relative path, name)
    container: WrappedValue
    steps: tuple[str, ...]
    value: Any


@dataclass
class Watch:
    """What a call did, as the detectors saw it while it was interpreted (``ModuleCall.interpret_watched``)."""

    paths: dict[int, str]  # id of each module of the called subtree -> its relative path
    reads: set[tuple[str, str]] = field(default_factory=set)  # (relative path, attribute) read by getattr/hasattr
    dict_reads: set[str] = field(default_factory=set)  # relative paths whose __dict__ the user's code read
    # (kind, id of the holder, name) -> (holder, key, the value read then): attribute, global and item reads outside
    outside_reads: dict[tuple, tuple] = field(default_factory=dict)
    member_dicts: set[int] = field(default_factory=set)  # ids of the subtree's member dicts
    made_here: set[int] = field(default_factory=set)  # ids of the WrappedValues the call made
    refused: str | None = None  # the first thing it did that tracing it again would not do again
    # the ints read from the subtree's attributes, followed to their uses (``follow_indices``): each wrapper by id,
    # with its attribute; the items with attributes they selected, by id; what was read through them; and the
    # indices used otherwise than to select
    indices: dict[int, tuple[WrappedValue, tuple[str, str]]] = field(default_factory=dict)
    holders: dict[int, tuple[WrappedValue, Selection]] = field(default_factory=dict)
    selections: list[Selection] = field(default_factory=list)
    index_uses: set[tuple[str, str]] = field(default_factory=set)
    # what the call reached otherwise than through an index (the ids of the wrappers its attribute, item and global
    # reads gave), and the lists it passed to a lookaside or an opaque function: a selection they share is no
    # selection (the record could not tell which read a replay should make again)
    reached: set[int] = field(default_factory=set)
    reached_tensors: set = field(default_factory=set)  # and the variables of the tensors among them
    passed: set[int] = field(default_factory=set)
    holder_dicts: set[int] = field(default_factory=set)  # the ids of the selected items' ``__dict__`` wrappers

    def reach(self, value: object) -> None:
        """Note ``value`` as read otherwise than through an index."""
        self.reached.add(id(value))
        if isinstance(held := unwrap(value), TensorProxy):
            self.reached_tensors.add(variableify(held))

    def refuse(self, reason: str) -> None:
        if self.refused is None:
            self.refused = reason

    @property
    def selecting(self) -> set[tuple[str, str]]:
        """The subtree's int attributes the call read and used only as a list's index (or not at all)."""
        return {key for _, key in self.indices.values()} - self.index_uses

    def outside_now(self):
        """``(kind, name, then, now)`` of each read from outside the subtree: the value read then, and now."""
        for (kind, _, name), (holder, key, then) in self.outside_reads.items():
            yield kind, name, then, _NOW[kind](holder, key)


@dataclass
class Watched:
    """A watched call's interpretation: what the lookaside returns, and what it added to the trace and prologue."""

    result: Any  # the wrapped output, or the interpreter's signal of an exception raised
    raised: bool
    start: int  # the trace's bound symbols from here are the call's
    bsyms: list
    checked: list[Proxy]  # the proxies that the prologue checks the call added compare
    python_checks_since: int  # ``python_guards.mark()`` before the call

    @property
    def output(self) -> Any:
        return unwrap(self.result)


class ModuleCall:
    """One call of a module that the interpreter reached: the module, its wrapped arguments, and how to trace it."""

    def __init__(self, wrapped_self: WrappedValue, args: tuple, kwargs: dict) -> None:
        self.wrapped, self.args, self.kwargs = wrapped_self, args, kwargs
        self._reached: dict[tuple[Step, ...], WrappedValue] = {(): wrapped_self}

    @property
    def module(self) -> Any:
        return unwrap(self.wrapped)

    def arguments(self) -> tuple[tuple, dict]:
        """The call's arguments, unwrapped."""
        return tuple(map(unwrap, self.args)), {k: unwrap(v) for k, v in self.kwargs.items()}

    def interpret(self) -> Any:
        """The call interpreted as thunder interprets it. In the extension's compilations, torch's hooks for every
        module are checked at each call (a library's globals are not, otherwise); and where neither they nor the
        module's hooks are set and ``torch.jit`` is not tracing, ``_call_impl``'s Python reads the module's four hook
        dicts and calls ``forward``: that is done here, each read through the interpreter as the code reads it, so
        that the compilation checks the dicts as it would, without interpreting their truth values, which thunder
        emulates at about a third of the time an HF decoder layer took to interpret."""
        if compiling_with_extension():
            for name in _GLOBAL_HOOK_DICTS:
                python_guards.check_library_global(torch.nn.modules.module.__name__, name)
            if not global_hooks_present() and torch._C._get_tracing_state() is None:
                held = [_interpret_call(getattr, self.wrapped, wrap_const(name)) for name in _HOOK_DICTS]
                if not any(h is INTERPRETER_SIGNALS.EXCEPTION_RAISED or unwrap(h) for h in held):
                    forward = _interpret_call(getattr, self.wrapped, wrap_const("forward"))
                    if forward is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
                        return forward
                    return _interpret_call(forward, *self.args, **self.kwargs)
        return _interpret_call(_interpreted_call_impl, self.wrapped, *self.args, **self.kwargs)

    def interpret_watched(self, watch: Watch) -> Watched:
        """The call interpreted while the detectors note what it does in ``watch``."""
        ctx, trace = jit_ext.get_jit_ctx(), get_tracectx()
        for m in self.module.modules():
            watch.member_dicts.update((id(m._parameters), id(m._buffers), id(m._modules), id(m.__dict__)))
        member_writes = sum(map(len, ctx._additional_outputs.values()))
        start, checks, python_checks = len(trace.bound_symbols), len(ctx._constraints), python_guards.mark()
        setattr(ctx, _WATCH, watch)
        _WATCHING.add(id(watch))
        try:
            result = self.interpret()
        finally:
            setattr(ctx, _WATCH, None)
            _WATCHING.discard(id(watch))
            _FOLLOWING.discard(id(watch))
        raised = result is INTERPRETER_SIGNALS.EXCEPTION_RAISED
        if not raised:
            _used(watch, result)  # an index or an object it selected, returned: the replay would return the record's
            if len(trace.scopes) != 1:
                watch.refuse("leaves a trace scope open")
            if sum(map(len, ctx._additional_outputs.values())) != member_writes:
                watch.refuse("assigns a module's parameter, buffer or submodule")
        checked = [a for constraint in ctx._constraints[checks:] for a in constraint[1:] if isinstance(a, Proxy)]
        return Watched(result, raised, start, trace.bound_symbols[start:], checked, python_checks)

    def path_of(self, p: Proxy) -> tuple[Step, ...] | None:
        """The access path of ``p`` from the module, where the interpreter read it from there; else None."""
        history = getattr(p, "history", None)
        return access_path(history, self.wrapped.provenance) if isinstance(history, ProvenanceRecord) else None

    def python_checks(self, since: int) -> list[tuple]:
        """The checks of Python values (``python_guards``) added since ``since`` that read from the module."""
        return python_guards.relative(self.wrapped.provenance, since, access_path)

    def reach(self, steps: tuple[Step, ...]) -> Any:
        """``steps`` run on this module through the interpreter, so that what it makes (the proxy, its provenance,
        the prologue's unpacking and checks) is what the module's own code would have made; unwrapped. Each prefix
        is run once: a block's tensors share most of theirs (``_modules``, ``attn``...)."""
        known = max((k for k in range(len(steps) + 1) if steps[:k] in self._reached), default=0)
        at = self._reached[steps[:known]]
        for k in range(known, len(steps)):
            kind, key = steps[k]
            # a plain dict's item (a module's ``_modules``, ``_parameters``, ``_buffers``): the interpreter would run
            # ``operator.getitem`` and ``__getitem__`` as two Python frames to reach this same lookaside
            read = getattr if kind == "attr" else dict.__getitem__ if type(unwrap(at)) is dict else operator.getitem
            at = _interpret_call(read, at, wrap_const(key))
            if at is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
                raise NotReplayable(f"the access path {steps} fails on this module")
            self._reached[steps[: k + 1]] = at
        return unwrap(at)

    def select(self, selection: Selection, index: tuple[Step, ...]) -> Any:
        """What ``selection`` read, read again on this call: its list indexed by this module's value at ``index``
        (read through the interpreter, so that the prologue checks it), and its attributes read from the item;
        unwrapped."""
        self.reach(index)
        at = _interpret_call(list.__getitem__, selection.container, self._reached[index])
        for name in selection.steps:
            if at is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
                break
            at = _interpret_call(getattr, at, wrap_const(name))
        if at is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
            raise Differs(f"the list's item at this module's {selection.index[1]} has no {selection.steps}")
        return unwrap(at)

    def check_again(self, checked_values: list[tuple[Step, ...]], python_checks: list[tuple]) -> bool:
        """The prologue's checks of another call of the same code, made for this one: thunder's of the values at
        ``checked_values`` (``python_guards.replay_values``) and ``python_checks``. False where they cannot be."""
        for steps in python_guards.replay_values(self.wrapped, checked_values):
            self.reach(steps)
        return python_guards.replay(self.wrapped, python_checks)

    def returning(self, output: Any) -> WrappedValue:
        """``output`` as the call's result, traced by the rest of the model."""
        return wrap(output, provenance=ProvenanceRecord(PseudoInst.LOOKASIDE, inputs=[self.wrapped.provenance]))


# the hook dicts ``_call_impl`` tests, the module's and torch's for every module (``torch.nn.modules.module``'s)
_HOOK_DICTS = ("_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_pre_hooks")
_GLOBAL_HOOK_DICTS = tuple(f"_global{name}" for name in _HOOK_DICTS)


def global_hooks_present() -> bool:
    """Whether torch holds a hook for every module (``register_module_forward_hook`` and its kin)."""
    return any(vars(torch.nn.modules.module)[name] for name in _GLOBAL_HOOK_DICTS)


_WATCH = "_thunder_ext_watch"
_STATES = "_thunder_ext_states"


def interpretation_state(key: str, make: Callable[[], Any]) -> Any:
    """The state ``key`` of the interpretation running now (kept on thunder's ``JitCtx``, which lives as long as
    it), made by ``make`` at its first request."""
    ctx = jit_ext.get_jit_ctx()
    if (states := getattr(ctx, _STATES, None)) is None:
        states = {}
        setattr(ctx, _STATES, states)
    if key not in states:
        states[key] = make()
    return states[key]


def _watch() -> Watch | None:
    try:
        return getattr(jit_ext.get_jit_ctx(), _WATCH, None)
    except LookupError:
        return None


def access_path(record: ProvenanceRecord, root: ProvenanceRecord) -> tuple[Step, ...] | None:
    """The steps from ``root`` to ``record`` where ``record`` is ``root`` followed by constant attribute loads and
    subscripts; None where it does not come from ``root``. Raises ``NotReplayable`` where it comes from ``root``
    some other way."""
    steps, at = [], record
    while at is not root:
        if at.inst in (PseudoInst.LOAD_ATTR, PseudoInst.BINARY_SUBSCR) and len(at.inputs) == 2:
            obj, key = at.inputs
            if key.inst is not PseudoInst.CONSTANT:
                if _depends_on(at, root):
                    raise NotReplayable(f"a {at.inst.name} with a computed key on the module")
                return None
            steps.append(("attr" if at.inst is PseudoInst.LOAD_ATTR else "item", key.value))
            at = obj
        else:
            if _depends_on(at, root):
                raise NotReplayable(f"a value the module gives through {at.inst}")
            return None
    return tuple(reversed(steps))


def _depends_on(record: ProvenanceRecord, root: ProvenanceRecord) -> bool:
    seen, todo = set(), [record]
    while todo:
        at = todo.pop()
        if at is root:
            return True
        if id(at) not in seen:
            seen.add(id(at))
            todo.extend(at.inputs)
    return False


# ---- the lookaside ----------------------------------------------------------------------------------------------

# _call_impl as another function object of the same code: interpreting it is interpreting _call_impl, which the
# lookaside (keyed by the original) does not see
_call_impl = torch.nn.Module._call_impl
_interpreted_call_impl = types.FunctionType(
    _call_impl.__code__, _call_impl.__globals__, _call_impl.__name__, _call_impl.__defaults__, _call_impl.__closure__
)
_interpreted_call_impl.__kwdefaults__ = _call_impl.__kwdefaults__
_interpreted_call_impl.__qualname__ = _call_impl.__qualname__


def _call_impl_lookaside(wrapped_self: WrappedValue, *args, **kwargs):
    call = ModuleCall(wrapped_self, args, kwargs)
    transform = extension_transform()
    if transform is None or _watch() is not None:  # no nesting: a call inside a watched one is part of it
        return call.interpret()
    return transform.trace_module_call(call)


# ---- what a watched call reads and writes -----------------------------------------------------------------------


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


def _user_reads_dict() -> bool:
    """Whether the code being interpreted reads ``<obj>.__dict__`` itself, not the interpreter's own attribute
    lookup nor ``nn.Module.__getattr__``, which read the member dicts through it."""
    frame = get_interpreterruntimectx().peek_frame_stack()
    if frame is None or frame.code.co_filename == torch.nn.modules.module.__file__:
        return False
    inst = frame.inst
    return inst is not None and inst.opname in ("LOAD_ATTR", "LOAD_METHOD") and inst.argval == "__dict__"


def _note_read(obj: WrappedValue, name: WrappedValue, value: object, *, plain: bool) -> None:
    """``plain``: a ``getattr`` of two arguments (not ``hasattr``, not one with a default)."""
    watch = _watch()
    if watch is None:
        return
    held, attribute = unwrap(obj), unwrap(name)
    if id(obj) in watch.holders:  # an item an index selected: read again from the item another index selects
        selection = watch.holders[id(obj)][1]
        if attribute == "__dict__" and not _user_reads_dict():  # the interpreter's own attribute lookup
            watch.holder_dicts.add(id(value))
        elif not plain or attribute == "__dict__":
            watch.index_uses.add(selection.index)
        elif isinstance(attribute, str) and attribute in vars(held):  # else its class's: the item's class is compared
            _select(watch, Selection(selection.index, selection.container, (*selection.steps, attribute), None), value)
    elif attribute != "__self__":  # a method's object: the interpreter unbinding a method bound to what it reached
        watch.reach(value)
    path = watch.paths.get(id(held))
    if path is not None:
        if attribute != "__dict__":
            watch.reads.add((path, attribute))
            if isinstance(value, WrappedValue) and type(value.value) is int:  # followed to its uses
                watch.indices[id(value)] = (value, (path, attribute))
                _FOLLOWING.add(id(watch))
        elif _user_reads_dict():
            watch.dict_reads.add(path)
        return
    # another object (a shared config): its instance attributes are checked again before each replay
    if isinstance(held, (Proxy, torch.Tensor, type, interpreter.ThunderInterpreterObject)):
        return
    if not isinstance(value, WrappedValue) or _made_by_the_call(watch, obj) or not isinstance(attribute, str):
        return
    holder_dict = getattr(held, "__dict__", None)
    dunder = attribute.startswith("__") and attribute.endswith("__")
    if isinstance(holder_dict, dict) and not dunder and (attribute in holder_dict or not callable(value.value)):
        key = ("attribute", id(held), attribute)
        watch.outside_reads.setdefault(key, (obj, attribute, _attribute_now(obj, attribute)))


def _made_by_the_call(watch: Watch, wrapped: object) -> bool:
    """Whether the watched call made this object itself, so that changing it is no side effect."""
    if not isinstance(wrapped, WrappedValue) or id(wrapped) not in watch.made_here:
        return False
    return wrapped.provenance.inst not in (
        PseudoInst.LOAD_ATTR, PseudoInst.BINARY_SUBSCR, PseudoInst.INPUT_ARGS, PseudoInst.INPUT_KWARGS,
        PseudoInst.INPUT_FN, PseudoInst.OPAQUE, PseudoInst.LOOKASIDE,
    )  # fmt: skip


def _reading(lookaside: Callable, *, getattr_: bool) -> Callable:
    def read(obj, name, *rest):
        value = lookaside(obj, name, *rest)
        _note_read(obj, name, value, plain=getattr_ and not rest)
        return value

    return read


def _assigning(lookaside: Callable) -> Callable:
    def assign(obj, name, value):
        if (watch := _watch()) is not None:
            made = jit_ext.is_created_during_tracing(obj.provenance) and id(obj) in watch.made_here
            if not made and type(unwrap(obj)) not in jit_ext._TORCH_DYNAMIC_TYPES:
                watch.refuse(f"assigns the attribute {unwrap(name)!r} of an object it did not make")
        return lookaside(obj, name, value)

    return assign


def _refusing(what: str) -> Callable[[Callable], Callable]:
    def wrap_handler(handler: Callable) -> Callable:
        def handle(inst, /, **kwargs):
            if (watch := _watch()) is not None:
                watch.refuse(what)
            return handler(inst, **kwargs)

        return handle

    return wrap_handler


def _changing(method: str) -> Callable[[Callable], Callable]:
    def wrap_lookaside(lookaside: Callable) -> Callable:
        def change(obj, *args, **kwargs):
            if (watch := _watch()) is not None and not _made_by_the_call(watch, obj):
                watch.refuse(f"changes a {method.split('.')[0]} it did not make ({method})")
            return lookaside(obj, *args, **kwargs)

        return change

    return wrap_lookaside


def _item_reading(lookaside: Callable) -> Callable:
    def read(obj, key, *rest):
        if (watch := _watch()) is not None and not _made_by_the_call(watch, obj):
            held, k = unwrap(obj), unwrap(key)
            if id(held) not in watch.member_dicts and is_plain(k):
                watch.outside_reads.setdefault(("item", id(held), k), (obj, k, _item_now(obj, k)))
        value = lookaside(obj, key, *rest)
        if watch is not None and id(key) not in watch.indices and id(obj) not in watch.holder_dicts:
            watch.reach(value)
        return value

    return read


# opaque callables that read no attribute of their arguments: making an object, binding a function to one, its type
_READ_NO_ATTRIBUTES = frozenset(
    map(id, (object.__new__, object.__init__, types.FunctionType.__get__, types.MethodDescriptorType.__get__,
             types.WrapperDescriptorType.__get__, callable, id, type, isinstance, issubclass))
)  # fmt: skip


# ---- an int of the module followed to its uses -------------------------------------------------------------------
#
# An HF decoder layer reads ``self.layer_idx`` only to pass it to ``past_key_values.update``, which indexes the
# cache's list of layers with it; a replay may give such a layer another index only where its record used the value
# for nothing else. thunder's interpreter uses a value where an opcode handler computes with it, or a call passes it
# to a lookaside or an opaque function. So each int read from an attribute of the subtree is followed by its
# wrapper (thunder wraps an int afresh at each read; frames, stacks and calls then hold that wrapper): moving it is
# no use (a local, an argument bound to a named parameter of an interpreted Python function, a return within the
# call); indexing a list from outside the subtree with it selects the item (``Selection``); anything else, passing
# it on inside a container too, is a use. An item with attributes that an index selected is followed the same way
# (its identity could be compared), and each attribute of its own read from it is a selection.

# ids of the watches interpreting a call now, and of those following an index (sets: compilations may run on threads)
_WATCHING: set[int] = set()
_FOLLOWING: set[int] = set()
# the opcodes that move a value without reading it, or read it only through a call ``_following_calls`` sees
_MOVING = frozenset({
    "LOAD_FAST", "STORE_FAST", "LOAD_CONST", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_CLOSURE", "PUSH_NULL", "PRECALL",
    "KW_NAMES", "CALL", "LOAD_ATTR", "LOAD_METHOD", "BINARY_SUBSCR", "POP_TOP", "COPY", "SWAP", "RETURN_VALUE",
    "RESUME", "NOP", "EXTENDED_ARG", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "COPY_FREE_VARS",
})  # fmt: skip
# a list's items read by these are noted as read (``Watch.reach``)
_READING_ITEMS = frozenset(map(id, (list.__getitem__, getattr, hasattr)))
_BINDING = frozenset(map(id, (types.FunctionType.__get__, types.MethodDescriptorType.__get__,
                              types.WrapperDescriptorType.__get__)))  # fmt: skip
_HEAP_TYPE = 1 << 9  # ``Py_TPFLAGS_HEAPTYPE``: a class made by a ``class`` statement


def _followed(watch: Watch, wrapped: object, depth: int = 0) -> Iterator[tuple[str, str]]:
    """The indices ``wrapped`` is, selected, or holds (an item of a tuple, list or dict the interpreter tracks)."""
    if not isinstance(wrapped, WrappedValue):
        return
    if (index := watch.indices.get(id(wrapped))) is not None:
        yield index[1]
    elif (holder := watch.holders.get(id(wrapped))) is not None:
        yield holder[1].index
    items = wrapped.item_wrappers
    if items and depth < 4:
        for item in items.values() if isinstance(items, dict) else items:
            yield from _followed(watch, item, depth + 1)


def _used(watch: Watch, *values: object) -> None:
    for value in values:
        watch.index_uses.update(_followed(watch, value))


def _holder(value: object) -> bool:
    """Whether ``value``'s attributes are all in its ``__dict__`` or its class's Python (no slots, no C base): an
    object whose attributes a replay reads again one by one."""
    if not isinstance(getattr(value, "__dict__", None), dict) or isinstance(value, (type, types.ModuleType, Proxy)):
        return False
    classes = type(value).__mro__
    return all(c is object or (c.__flags__ & _HEAP_TYPE and not c.__dict__.get("__slots__")) for c in classes)


def _select(watch: Watch, selection: Selection, result: object) -> None:
    """Note what an index selected (``selection.steps`` empty) or what was read from it: a tensor, a plain value,
    or an object (the item: compared by class, then followed; an attribute's: compared by identity); anything else
    is a use."""
    if not isinstance(result, WrappedValue):
        watch.index_uses.add(selection.index)
        return
    value = result.value
    selection = Selection(selection.index, selection.container, selection.steps, value)
    if isinstance(value, TensorProxy) or is_plain(value):
        watch.selections.append(selection)
    elif not selection.steps and _holder(value):
        watch.holders[id(result)] = (result, selection)
        watch.selections.append(selection)
    elif selection.steps and not isinstance(value, (Proxy, torch.Tensor, list, dict, set)):
        watch.selections.append(selection)
    else:
        watch.index_uses.add(selection.index)


def _following_calls(watch: Watch, fn: Callable, found: Callable | None, args: tuple, kwargs: dict):
    """``found``, the lookaside of a call the interpreter dispatches (None: ``fn``'s Python is interpreted, or ``fn``
    called opaquely), once what the call does with the followed values is noted; a selection's lookaside notes the
    item it gives."""
    positional = [(i, key) for i, a in enumerate(args) for key in _followed(watch, a)]
    named = [(name, key) for name, a in kwargs.items() for key in _followed(watch, a)]
    called = [holder[1].index for holder in watch.holders.values() if holder[0].value is fn]
    if not positional and not named and not called:
        return found
    if fn is list.__getitem__ and len(args) == 2 and not kwargs and id(args[1]) in watch.indices:
        container = args[0]
        outside = type(container.value) is list and not _made_by_the_call(watch, container)
        if outside and found is not None and not next(_followed(watch, container), None):
            index = watch.indices[id(args[1])][1]

            def select(*a):
                result = found(*a)
                _select(watch, Selection(index, container, (), None), result)
                return result

            return select
    elif id(fn) in _BINDING and [i for i, _ in positional] == [1] and not named and not called:
        return found  # a function bound to the item (a method looked up): its call is followed
    elif fn is getattr and not kwargs and id(args[0]) in watch.holders:
        if not any(next(_followed(watch, a), None) for a in args[1:]):
            return found  # ``_note_read`` notes the selection (or the use: with a default)
    elif found is None and not called and isinstance(fn, types.FunctionType):
        code = fn.__code__
        parameters = code.co_varnames[code.co_posonlyargcount : code.co_argcount + code.co_kwonlyargcount]
        if all(i < code.co_argcount for i, _ in positional) and all(name in parameters for name, _ in named):
            return found
    watch.index_uses.update(key for _, key in (*positional, *named))
    watch.index_uses.update(called)
    return found


def _following_opcodes(opname: str, handler: Callable) -> Callable:
    def handle(inst, /, **kwargs):
        if _FOLLOWING and (watch := _watch()) is not None and (watch.indices or watch.holders):
            if opname == "MAKE_CELL":  # a local put in a cell, which a closure that thunder does not run may read
                _used(watch, kwargs["frame"].localsplus[inst.arg])
            else:
                _used(watch, *kwargs["stack"]._stack)
        return handler(inst, **kwargs)

    return handle


def follow_indices() -> None:
    """Follow each int a watched call reads from its subtree through every opcode handler but those that only move
    it; installed last, around the handlers the other changes put in thunder's table."""
    table = interpreter._default_opcode_handler_map
    for opname, handler in table.items():
        if opname not in _MOVING:
            table[opname] = _following_opcodes(opname, handler)


def _seeing_opaque_calls(lookaside: Callable) -> Callable:
    """thunder runs a C function (``vars``, ``operator.attrgetter``, ``object.__getattribute__``) without seeing what
    it reads: a watched call that passes such a function a module of its subtree or an object from outside it with
    attributes cannot be traced again from what it did, since what the function read is not known to be the same on
    another call."""

    def find(fn, *args, **kwargs):
        found = lookaside(fn, *args, **kwargs)
        if not _WATCHING or (watch := _watch()) is None:
            return found
        if _FOLLOWING and (watch.indices or watch.holders):
            found = _following_calls(watch, fn, found, args, kwargs)
        opaque = found is None and interpreter.is_opaque(fn)
        if (found is not None or opaque) and id(fn) not in _READING_ITEMS:
            watch.passed.update(id(a) for a in (*args, *kwargs.values()) if type(unwrap(a)) is list)
        if opaque and id(fn) not in _READ_NO_ATTRIBUTES:
            made = 1 if getattr(fn, "__name__", None) == "__init__" else 0  # the object an __init__ makes
            for a in (*args[made:], *kwargs.values()):
                if _has_attributes_to_read(watch, a):
                    name = getattr(fn, "__qualname__", type(fn).__name__)
                    watch.refuse(f"passes a {type(unwrap(a)).__name__} to {name}, whose reads thunder cannot see")
        return found

    return find


def _has_attributes_to_read(watch: Watch, wrapped: object) -> bool:
    held = unwrap(wrapped)
    if id(held) in watch.paths:
        return True
    if not isinstance(getattr(held, "__dict__", None), dict) or _made_by_the_call(watch, wrapped):
        return False
    return not isinstance(held, (type, types.ModuleType, types.FunctionType, types.MethodType, Proxy, torch.Tensor))


def _noting_made(callback: Callable) -> Callable:
    def wrap_callback(value):
        if (watch := _watch()) is not None:
            # a constant wrapped now may be an object that existed before: only empty new containers count as made
            held = value.value
            if value.provenance.inst is not PseudoInst.CONSTANT or (type(held) in (list, dict) and not held):
                watch.made_here.add(id(value))
        return callback(value)

    return wrap_callback


def _noting_globals(callback: Callable) -> Callable:
    def read_global(value, name):
        if (watch := _watch()) is not None:
            watch.reach(value)
            frame = get_interpreterruntimectx().peek_frame_stack()
            globals_ = unwrap(frame.globals) if frame is not None else None
            if isinstance(globals_, dict):
                key = ("global", id(globals_), name)
                watch.outside_reads.setdefault(key, (globals_, name, _global(globals_, name)))
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
        _wrap_entry(lookasides, read, functools.partial(_reading, getattr_=read is getattr))
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
