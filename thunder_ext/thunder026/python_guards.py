"""Every Python value a compilation read, checked at every call: a prologue check for each value thunder's own
prologue leaves unchecked.

thunder 0.2.6's prologue re-reads, at each call, every number and string the traced code read from the compiled
object or the arguments (``self.config.n_head``, ``self.training``), each by the path the interpreter read it
(its provenance), and compares it. Anything else read that way is not compared: a None (``if self.cap is not
None``), a container's length (``for b in self.blocks``), a submodule's class, a function held in an attribute,
an attribute that was absent (``getattr(self, "k", None)``), the sign of a zero; nor what was read another way
(``vars(self)["k"]``, ``type(self).k``, ``object.__getattribute__``) or from a module's globals. A call after an
edit of any of these ran the program traced for the old value (issue 60).

Here the interpreter's wrap callback sees each value as it is read. For each one of these, reached from the
compiled object or the arguments by attribute and item reads (read another way, the path is rewritten to them),
or from the globals of a module of the user's (not an installed package, not Python's library), it adds a prologue
check that the value read again by that path has the same description as now (``executors.checks.python_value``:
a value by type and ``repr``, a container by type, length, string keys and plain items, a function or class by
its name and line, any other object by its class). The checks are prologue checks like thunder's: they are saved
with the entry, a block's replay makes them again for each block it replays (with the checks thunder's prologue
made of the recorded block's numbers and strings: ``replay_values``), and a check that fails is a miss.
The getattr and hasattr lookasides note an absent attribute the same way.

Not checked (no path to read it again): what an opaque call returned from a value it was given (``sum(self.l)``
reads the list, whose length and plain items are checked, not its objects' attributes), ``globals()[...]``, a
global of an installed package or of Python's library, an attribute of an object the call made. Installed by
``adapt_thunder``, for the extension's compilations only.

Retired by: thunder guarding the values its prologue does not check today.
"""

from __future__ import annotations

import dis
import operator
import sys
import types
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from thunder.core import interpreter, jit_ext
from thunder.core.interpreter import (
    ProvenanceRecord,
    PseudoInst,
    WrappedValue,
    get_interpreterruntimectx,
    unwrap,
)
from thunder.core.proxies import Proxy
from thunder.core.trace import tracectx

from thunder_ext.libraries import in_library
from thunder_ext.executors.checks import check_python_values, encoded, expect, expect_whole, failing, read_path
from thunder_ext.logs import logger
from thunder_ext.thunder026.compiled import synced_members, thunder_module_compiling
from thunder_ext.thunder026.scope import compiling_with_extension

_ROOTS = frozenset({"INPUT_FN", "INPUT_ARGS", "INPUT_KWARGS"})
# thunder's prologue checks these, read by a path it can unpack (a float only by ``==``: -0.0 is 0.0 there)
_THUNDERS = (bool, int, float, str, complex, slice, torch.device)
# decided by the class of the object they belong to, or read again as what they hold
_BY_CLASS = (types.MethodWrapperType, types.CellType)
_UNNOTED = (Proxy, *_BY_CLASS)  # a proxy: thunder's prologue checks it
# values whose identity means nothing: two paths to one of them are not one object read twice
_VALUES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
# the dunder attributes a path reads through; any other (``__getattr__``, ``__func__``, a library's ``__globals__``)
# is its object's class's, or the interpreter's own machinery
_READ_AGAIN = frozenset({"__dict__", "__class__", "__closure__", "__defaults__", "__kwdefaults__", "__self__"})
# thunder's lookaside of ``type``, as the record of what it returned names it (``interpreter_needs_wrap``'s ``fn``)
_TYPE = dict(zip(interpreter._type_lookaside.__code__.co_freevars, interpreter._type_lookaside.__closure__))[
    "fn"
].cell_contents
# C functions that read attributes or items the interpreter does not see read, whose reads a path says: their
# values are kept by the record of each read of them (a call's record names the function by that record)
_READERS = frozenset(map(id, (vars, type, getattr, object.__getattribute__)))
_READER_TYPES = (operator.attrgetter, operator.itemgetter)
Step = tuple[str, object]  # ("attr", name), ("item", key), ("nth", place) of a dict's values, or ("has", name)
Steps = tuple[Step, ...]
Path = tuple[ProvenanceRecord | str, Steps]  # from a root record, or from a module's globals (its name)


@dataclass
class Check:
    """A value to read again at each call by ``path``, compared as ``executors.checks.expect`` says, or (``("same",
    other)``) the very object at the path ``other``. ``record`` is the interpreter's record of the value read (of
    the object asked, with ``after`` the steps past it), ``other_record`` and ``held`` those of the other object:
    block replay finds each path again on another block by them."""

    path: Path
    expected: tuple
    record: ProvenanceRecord | None
    after: Steps = ()
    other_record: ProvenanceRecord | None = None
    held: object = None


def _inst(pr: ProvenanceRecord) -> str:
    inst = pr.inst
    return inst.opname if isinstance(inst, dis.Instruction) else inst.value


def _const(pr: ProvenanceRecord) -> object:
    return pr.value if _inst(pr) == "CONSTANT" else None


def _function(pr: ProvenanceRecord, reads: _Reads) -> object:
    """The function a call's record names: a constant (a lookaside), or a reader read by that record."""
    return reads.readers[id(pr)][1] if id(pr) in reads.readers else _const(pr)


def _called(fn: object, args: list[ProvenanceRecord], reads: _Reads) -> tuple[ProvenanceRecord, Steps] | None:
    """The argument a call of the C function ``fn`` on ``args`` reads from, and the reads it is: ``vars(x)`` is
    ``x.__dict__``, ``type(x)`` is ``x.__class__``, ``attrgetter("a.b")(x)`` is ``x.a.b``, ``itemgetter(k)(x)`` is
    ``x[k]``, ``object.__getattribute__(x, "a")`` and ``getattr(x, "a")`` are ``x.a``; None for any other call.
    (A getter's call is its class's ``__call__`` of the getter and ``x``.)"""
    if len(args) == 2 and (fn is operator.attrgetter.__call__ or fn is operator.itemgetter.__call__):
        fn, args = _function(args[0], reads), args[1:]
    if len(args) == 1 and (fn is vars or fn is type or fn is _TYPE):
        return args[0], (("attr", "__dict__" if fn is vars else "__class__"),)
    if len(args) == 2 and (fn is object.__getattribute__ or fn is getattr) and isinstance(name := _const(args[1]), str):
        return args[0], (("attr", name),)
    if len(args) == 1 and type(fn) is operator.attrgetter and len(names := fn.__reduce__()[1]) == 1:
        return args[0], tuple(("attr", name) for name in names[0].split("."))
    if len(args) == 1 and type(fn) is operator.itemgetter and len(keys := fn.__reduce__()[1]) == 1:
        return (args[0], (("item", keys[0]),)) if type(keys[0]) in (int, str) else None
    return None


class _Reads:
    """One compilation's checks, each once, and the module of each ``__globals__`` record read (the record kept, so
    that its id stays its own)."""

    def __init__(self) -> None:
        self.checks: dict[tuple, Check] = {}
        self.globals: dict[int, tuple[ProvenanceRecord, str]] = {}
        self.readers: dict[int, tuple[ProvenanceRecord, object]] = {}  # a reader's record -> (it, the reader)
        self.compiled: object = None  # the object the interpreter runs (its INPUT_FN)
        # each record's ``_path`` (the record kept, so that its id stays its own), as the globals and readers known
        # when it was found say: emptied when they gain one
        self.paths: dict[int, tuple[ProvenanceRecord, Path | None]] = {}

    def add(self, check: Check) -> None:
        expected = check.expected
        if expected[0] == "same":
            expected = ("same", _path_key(expected[1]))
        self.checks.setdefault((_path_key(check.path), expected), check)


def _path_key(path: Path) -> tuple:
    """``path`` as compared: ``x.__dict__[k]`` as ``x.k`` (the same entry, where no data descriptor of the class
    hides it: as thunder reads a module's)."""
    steps, i = list(path[1]), 0
    while i < len(steps) - 1:
        if steps[i] == ("attr", "__dict__") and steps[i + 1][0] == "item" and isinstance(steps[i + 1][1], str):
            steps[i : i + 2] = [("attr", steps[i + 1][1])]
        i += 1
    return (id(path[0]) if isinstance(path[0], ProvenanceRecord) else path[0], tuple(steps))


def _reads() -> _Reads:
    ctx = jit_ext.get_jit_ctx()
    reads = getattr(ctx, "_thunder_ext_reads", None)
    if reads is None:
        reads = ctx._thunder_ext_reads = _Reads()
    return reads


def _user_module(globals_: object) -> str | None:
    """The name of the module whose globals ``globals_`` is, where it is the user's."""
    name = globals_.get("__name__") if isinstance(globals_, dict) else None
    module = sys.modules.get(name) if isinstance(name, str) else None
    if module is None or vars(module) is not globals_ or in_library(module):
        return None
    return name


def _path(pr: ProvenanceRecord, reads: _Reads) -> Path | None:
    """``pr`` as attribute and item reads from the compiled object's or the arguments' record, or from the globals of
    a module of the user's; None where it is not, or reads from a tensor (the prologue checks its metadata), or
    passes through a dunder other than ``_READ_AGAIN`` or a library's globals. Found once for each record (a
    layer's hundreds of reads would each walk their records back to the model's)."""
    if (known := reads.paths.get(id(pr))) is None:
        known = reads.paths[id(pr)] = (pr, _path_walked(pr, reads))
    return known[1]


def _path_walked(pr: ProvenanceRecord, reads: _Reads) -> Path | None:
    inst = _inst(pr)
    if inst in _ROOTS:
        return pr, ()
    if (module := reads.globals.get(id(pr))) is not None:
        return module[1], ()
    if pr.inputs and pr.inputs[0].ext_flag & jit_ext.EXT_FLAG_IS_TENSOR_PROXY:
        return None
    if inst == "LOAD_ATTR" and len(pr.inputs) == 2 and isinstance(name := _const(pr.inputs[1]), str):
        if name.startswith("__") and name.endswith("__") and name not in _READ_AGAIN:
            return None
        return _then(_path(pr.inputs[0], reads), ("attr", name))
    if inst == "BINARY_SUBSCR" and len(pr.inputs) == 2 and type(key := _const(pr.inputs[1])) in (int, str):
        path = _then(_path(pr.inputs[0], reads), ("item", key))
        return None if path is None else _hook_by_place(path, reads)
    if inst == "OPAQUE" and len(pr.inputs) == 3 and _inst(pr.inputs[1]) == "BUILD_TUPLE":
        args = pr.inputs[1].inputs[::-1]  # thunder's BUILD_TUPLE records its items last first
        if (read := _called(_function(pr.inputs[0], reads), args, reads)) is not None:
            return _then(_path(read[0], reads), *read[1])
    return None


def _then(path: Path | None, *steps: Step) -> Path | None:
    return None if path is None else (path[0], (*path[1], *steps))


# ---- what the interpreter reads ---------------------------------------------------------------------------------


_NAMESPACE_FILLED: ContextVar[bool] = ContextVar("thunder_ext_namespace_filled", default=False)


def _is_namespace(wrapped: WrappedValue) -> bool:
    """Whether ``wrapped`` is an object's ``__dict__``, read as such or by ``vars``."""
    pr = wrapped.provenance
    if _inst(pr) == "LOAD_ATTR":
        return _const(pr.inputs[1]) == "__dict__"
    return _inst(pr) == "OPAQUE" and compiling_with_extension() and _function(pr.inputs[0], _reads()) is vars


def _held(wrapped: WrappedValue) -> object:
    """What ``wrapped`` holds, a number thunder proxied as itself."""
    return wrapped.value if wrapped.original_value is wrapped.nothing else wrapped.original_value


def _not_noting_a_namespace_filled(populate: Callable) -> Callable:
    """The interpreter's ``populate_item_wrappers``: where it wraps every entry of an object's ``__dict__`` at once
    (to look one up, or test one's presence), that reads none of them; an entry read is noted as it is read."""

    def filling(obj):
        if not _is_namespace(obj):
            return populate(obj)
        token = _NAMESPACE_FILLED.set(True)
        try:
            return populate(obj)
        finally:
            _NAMESPACE_FILLED.reset(token)

    return filling


def _noting_reads(wrap: Callable) -> Callable:
    """The interpreter's ``wrap``, through which each value it reads first gets its record."""

    def wrapping(value, /, *, provenance: ProvenanceRecord):
        result = wrap(value, provenance=provenance)
        if provenance.inst is PseudoInst.CONSTANT or isinstance(value, WrappedValue) or _NAMESPACE_FILLED.get():
            return result  # a constant has no path; a value already wrapped was noted when it was
        if compiling_with_extension():
            if provenance.inst is PseudoInst.INPUT_FN:
                _reads().compiled = value
            if id(value) in _READERS or type(value) in _READER_TYPES:
                _reads().readers[id(result.provenance)] = (result.provenance, value)
                _reads().paths.clear()
            _note(value, provenance, result.provenance)
        return result

    return wrapping


def _noting_attribute_reads(wrap_attribute: Callable) -> Callable:
    """The interpreter's ``wrap_attribute``: every attribute read, the second of one object's too (which gets the
    wrapper of the first, made by ``wrap`` above)."""

    def reading(plain_result, obj, name):
        result = wrap_attribute(plain_result, obj, name)
        if isinstance(result, WrappedValue) and compiling_with_extension():
            _note(plain_result, ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[obj.provenance, name.provenance]),
                  result.provenance)  # fmt: skip
        return result

    return reading


def _noting_namespace_reads(getitem: Callable) -> Callable:
    """The lookaside of ``dict.__getitem__``: an entry of an object's ``__dict__`` read (``vars(self)["k"]``), which
    may get the wrapper its namespace's filling made."""

    def reading(mapping, key, *rest):
        result = getitem(mapping, key, *rest)
        if isinstance(result, WrappedValue) and isinstance(key, WrappedValue) and _is_namespace(mapping):
            if compiling_with_extension():
                read = ProvenanceRecord(PseudoInst.BINARY_SUBSCR, inputs=[mapping.provenance, key.provenance])
                _note(_held(result), read, result.provenance)
        return result

    return reading


def _note(held: object, pr: ProvenanceRecord, first: ProvenanceRecord) -> None:
    """Note the checks of ``held``, read by ``pr``; ``first`` is the record of its wrapper, made when the object was
    first read (by ``pr``'s path: then thunder's callback saw it, and proxied a number read by a path its prologue
    unpacks; by another: everything read from it goes by that one, so this one is checked to reach the same object)."""
    inst = _inst(pr)
    if inst in _ROOTS or inst == "CONSTANT" or isinstance(held, _UNNOTED):
        return
    reads = _reads()
    holder = pr.inputs[0] if inst == "BINARY_SUBSCR" else None
    if holder is not None and _inst(holder) == "LOAD_ATTR" and _const(holder.inputs[1]) == "__globals__":
        _note_globals(holder, reads)
    if (path := _path(pr, reads)) is None or path[1][-1:] == (("attr", "__dict__"),):
        return  # no path; or an object's namespace, whose entries are checked as they are read
    other = path if first is pr else _path(first, reads)
    own = other is not None and _path_key(other) == _path_key(path)
    if not own and other is not None and not isinstance(held, _VALUES):
        reads.add(Check(path, ("same", other), pr, other_record=first, held=held))
    if isinstance(held, torch.Tensor):
        return  # the prologue checks its metadata, by its first path
    if own and isinstance(held, _THUNDERS) and not (type(held) is float and held == 0.0):
        if jit_ext.should_register_for_prologue(first):
            return  # proxied by thunder, and checked by its prologue
    if isinstance(held, types.MethodType) and in_library(held.__func__):
        return  # a library's method: its object's class decides it
    if isinstance(held, types.BuiltinMethodType) and not isinstance(held.__self__, (types.ModuleType, type(None))):
        return  # a builtin method of an object (``d.get``): its object's class decides it
    reads.add(Check(path, expect(held), pr))


def check_library_global(module: str, name: str) -> None:
    """Check at each call that the global ``name`` of the library module ``module`` reads as it does now: a library's
    globals are left unchecked otherwise, and torch's hooks for every module, which each module call tests, change
    what the traced modules compute (``module_calls.ModuleCall.interpret``)."""
    _reads().add(Check((module, (("item", name),)), expect(vars(sys.modules[module])[name]), None))


def _hook_by_place(path: Path, reads: _Reads) -> Path:
    """A hook read from a module's hook dict by its key, a handle's id (a count of this process's hooks), as read by
    its place in the dict: the same hooks registered in another process, or again, are the same program."""
    root, steps = path
    if len(steps) < 2 or steps[-1][0] != "item" or type(steps[-1][1]) is not int:
        return path
    if steps[-2][0] != "attr" or not str(steps[-2][1]).endswith("hooks") or _inst(root) != "INPUT_FN":
        return path
    try:
        place = list(read_path(reads.compiled, steps[:-1])).index(steps[-1][1])
    except (ValueError, TypeError, LookupError, AttributeError):
        return path
    return root, (*steps[:-1], ("nth", place))


def _noting_defaults(setup_frame: Callable) -> Callable:
    """The interpreter's ``_setup_frame_and_run_python_function``: it wraps a function's defaults as constants, so
    nothing read from one has a path; the defaults of each function of the user's it runs are checked whole, by
    the function's path (``checks.expect_whole``)."""

    def setup(compilectx, runtimectx, wrapped_fn, /, *args, **kwargs):
        fn = unwrap(wrapped_fn)
        if isinstance(fn, types.FunctionType) and compiling_with_extension() and not in_library(fn):
            reads = _reads()
            if (path := _path(wrapped_fn.provenance, reads)) is not None:
                for name in ("__defaults__", "__kwdefaults__"):
                    reads.add(Check(_then(path, ("attr", name)), expect_whole(getattr(fn, name)), None))
        return setup_frame(compilectx, runtimectx, wrapped_fn, *args, **kwargs)

    return setup


def _note_globals(globals_pr: ProvenanceRecord, reads: _Reads) -> None:
    """The globals of a function the interpreter runs, where its module is the user's: paths through that
    ``__globals__`` record start at the module. (The frame reading them is thunder's own small function of a
    subscript; the function whose globals they are runs below it.)"""
    if id(globals_pr) in reads.globals:
        return
    for frame in reversed(get_interpreterruntimectx().frame_stack):
        if getattr(frame.globals, "provenance", None) is globals_pr:
            if (module := _user_module(unwrap(frame.globals))) is not None:
                reads.globals[id(globals_pr)] = (globals_pr, module)
                reads.paths.clear()
            return


def _noting_absent(lookaside: Callable, present_of: Callable[[object, tuple], bool | None]) -> Callable:
    """``getattr``'s or ``hasattr``'s lookaside, noting whether it found an attribute (a dunder: its class's)."""

    def read(obj, name, *rest):
        result = lookaside(obj, name, *rest)
        uname = unwrap(name)
        if compiling_with_extension() and isinstance(obj, WrappedValue) and isinstance(uname, str):
            present = present_of(result, rest)
            if present is not None and not (uname.startswith("__") and uname.endswith("__")):
                reads = _reads()
                if not isinstance(obj.value, (torch.Tensor, Proxy)) and (path := _path(obj.provenance, reads)):
                    after = (("has", uname),)
                    reads.add(Check(_then(path, *after), expect(present), obj.provenance, after))
        return result

    return read


def _getattr_present(result: object, rest: tuple) -> bool | None:
    # a getattr with a default that returned the default found the attribute absent; else it says nothing
    return False if rest and result is rest[0] else None


def _hasattr_present(result: object, rest: tuple) -> bool | None:
    held = unwrap(result) if isinstance(result, WrappedValue) else result
    return held if isinstance(held, bool) else None


# ---- the prologue's check ---------------------------------------------------------------------------------------


def _adding_the_check(unpack_inputs: Callable) -> Callable:
    """thunder's ``unpack_inputs``, which makes the prologue from the interpreter's constraints, given one more: the
    compilation's checks, as ``check_python_values`` of the roots they start from."""

    def unpack(ctx, prologue_trace, pro_to_comp, pro_to_epi, args, kwargs):
        reads = getattr(ctx, "_thunder_ext_reads", None)
        if reads is not None and reads.checks:
            with tracectx(prologue_trace):  # the roots' names are the prologue's
                ctx.add_constraint(_constraint(list(reads.checks.values()), reads.compiled, args, kwargs))
        return unpack_inputs(ctx, prologue_trace, pro_to_comp, pro_to_epi, args, kwargs)

    return unpack


def _constraint(checks: list[Check], compiled: object, args: tuple, kwargs: dict) -> tuple:
    """``(check_python_values, spec, *roots)``: a proxy of a fresh record for each root (the compiled object, an
    argument: its item of args or kwargs, which thunder unpacks itself), which the prologue unpacks, and each check
    as ``(root, steps, expected)``, its root (and a same object's) by its proxy's index or its module's name. A check
    that this very call fails is left out, logged: the interpreter read that value otherwise than Python does (HF's
    configs answer ``getattr`` by their own rules), so the program holds for neither; keeping it would compile
    every call again."""
    roots: dict[tuple, int] = {}
    proxies: list[Proxy] = []
    held: list[object] = []  # each root's object in this call

    def literal(path: Path) -> tuple[int | str, Steps]:
        root, steps = path
        if isinstance(root, str):
            return root, steps
        head, steps = ((), steps) if _inst(root) == "INPUT_FN" else (steps[:1], steps[1:])
        key = (_inst(root), head)
        if key not in roots:
            # not flagged as a module: thunder's unpacking would give the ThunderModule, not the module it runs
            fresh = ProvenanceRecord(root.inst, inputs=[])
            proxies.append(Proxy(prefix="root", history=_record(fresh, head)))
            held.append(compiled if not head else read_path(args if _inst(root) == "INPUT_ARGS" else kwargs, head))
            roots[key] = len(roots)
        return roots[key], steps

    spec = []
    for c in checks:
        expected = ("same", *literal(c.expected[1])) if c.expected[0] == "same" else c.expected
        spec.append((*literal(c.path), expected))
    if isinstance(compiled, torch.nn.Module) and (tm := thunder_module_compiling(compiled)) is not None:
        # the ThunderModule's snapshot, which its prologue unpacks, is the module's that was traced, and stays so
        # (reached from the module at each call, not unpacked: thunder's distributed transforms allow one ThunderModule)
        module = literal((ProvenanceRecord(PseudoInst.INPUT_FN, inputs=[]), ()))[0]
        snapshots = ("thunder module", module)
        spec += [(module, live, ("same", snapshots, snapshot)) for live, snapshot in synced_members(tm)]
    return (check_python_values, encoded(_holding(_without_implied_classes(spec, held), tuple(held))), *proxies)


# the checks that compare the very class of what they read (``checks.expect``)
_CLASS_EXACT = frozenset({"is", "float", "plain", "strings", "keys", "len", "class"})


def _without_implied_classes(spec: list[tuple], roots: list) -> tuple:
    """``spec`` without each check of ``x.__class__`` that ``x``'s own check implies: one that compares ``x``'s class,
    where ``x.__class__`` reads ``type(x)`` (a class decides that, and the class is checked)."""
    exact = {(root, steps) for root, steps, expected in spec if expected[0] in _CLASS_EXACT}

    def implied(root: int | str, steps: tuple) -> bool:
        if steps[-1:] != (("attr", "__class__"),) or (root, steps[:-1]) not in exact:
            return False
        try:
            obj = read_path(roots[root] if isinstance(root, int) else vars(sys.modules[root]), steps[:-1])
            return obj.__class__ is type(obj)
        except Exception:  # noqa: BLE001  (kept: the check says what reads)
            return False

    return tuple(check for check in spec if not implied(check[0], check[1]))


def _holding(spec: tuple, roots: tuple) -> tuple:
    """``spec`` without the checks that fail on ``roots`` now, each logged (at DEBUG); ``spec`` itself where all hold
    (its text is made once)."""
    differ = set(failing(spec, roots))
    if not differ:
        return spec
    for i in sorted(differ):
        logger.debug("thunder_ext: a Python value read otherwise by thunder's interpreter, not checked: %s", spec[i])
    return tuple(check for i, check in enumerate(spec) if i not in differ)


def _record(pr: ProvenanceRecord, steps: Steps) -> ProvenanceRecord:
    for kind, key in steps:
        inst = PseudoInst.LOAD_ATTR if kind == "attr" else PseudoInst.BINARY_SUBSCR
        pr = ProvenanceRecord(inst, inputs=[pr, ProvenanceRecord(PseudoInst.CONSTANT, inputs=[], value=key)])
    return pr


# ---- block replay -----------------------------------------------------------------------------------------------


def mark() -> int:
    """How many checks the compilation has: a block's record takes the checks its call adds after this."""
    return len(_reads().checks)


def relative(root: ProvenanceRecord, since: int, access_path: Callable) -> list[tuple]:
    """The checks added since ``since`` that read from the block ``root``, by their steps from it: ``(steps, None)``
    for a value, ``(steps, ("inside", steps))`` or ``(steps, ("outside", path, object))`` for a same object. A
    check's steps are those of its path past the block's; where the block has no path, those of its record
    (``access_path`` raises where a value comes from the block otherwise: not replayable)."""
    block = _path(root, _reads())

    def steps_of(path: Path, record: ProvenanceRecord | None, after: Steps) -> Steps | None:
        if block is not None:
            inside = path[0] is block[0] and path[1][: len(block[1])] == block[1]
            return path[1][len(block[1]) :] if inside else None
        steps = None if record is None else access_path(record, root)
        return None if steps is None else (*steps, *after)

    found = []
    for check in list(_reads().checks.values())[since:]:
        if (steps := steps_of(check.path, check.record, check.after)) is None:
            continue
        if check.expected[0] != "same":
            found.append((steps, None))
        elif (other := steps_of(check.expected[1], check.other_record, ())) is not None:
            found.append((steps, ("inside", other)))
        else:
            found.append((steps, ("outside", check.expected[1], check.held)))
    return found


def replay(block: WrappedValue, checks: list[tuple]) -> bool:
    """The checks of a recorded block made again for ``block``, which replays it: each value as it reads on this
    block now (the values the record's call read are the record's, ``regional/keys.py``; others may differ:
    ``block_idx``), each same object only where it is the same here too. False where the block has no path to check
    them by, or where one does not hold here."""
    reads = _reads()
    if (path := _path(block.provenance, reads)) is None:
        return not checks
    for steps, same in checks:
        try:
            value = read_path(block.value, steps)
            if same is not None:
                other = read_path(block.value, same[1]) if same[0] == "inside" else same[2]
        except Exception:
            return False
        if same is None:
            reads.add(Check(_then(path, *steps), expect(value), None))
        elif value is other:
            where = _then(path, *same[1]) if same[0] == "inside" else same[1]
            reads.add(Check(_then(path, *steps), ("same", where), None))
        else:
            return False
    return True


def replay_values(block: WrappedValue, paths: list[Steps]) -> list[Steps]:
    """The checks of thunder's prologue on the block's numbers and strings at ``paths`` (the record's), made again
    for ``block``, which replays it, as checks of its Python values: each then costs an entry of the one
    ``check_python_values``, not an unpacking and a check of its own in the prologue (and no read through the
    interpreter to make them). A check expects as much as thunder's (type and value; a float by its bits). Returns
    the paths not made so (no path to the block, another kind of value), for the caller to make as thunder does."""
    reads = _reads()
    if (path := _path(block.provenance, reads)) is None:
        return paths
    rest = []
    for steps in paths:
        try:
            value = read_path(block.value, steps)
        except Exception:  # noqa: BLE001  (kept: read as thunder reads it, which says what fails)
            value = None
        if type(value) in (bool, int, float, str):
            reads.add(Check(_then(path, *steps), expect(value), None))
        else:
            rest.append(steps)
    return rest


def install() -> None:
    """Put the read noting, the lookasides and the prologue's check into thunder's interpreter (``adapt_thunder``
    calls it once)."""
    interpreter.wrap = _noting_reads(interpreter.wrap)
    interpreter.wrap_attribute = _noting_attribute_reads(interpreter.wrap_attribute)
    interpreter.populate_item_wrappers = _not_noting_a_namespace_filled(interpreter.populate_item_wrappers)
    tracking = interpreter._default_provenance_tracking_lookaside_map
    tracking[dict.__getitem__] = _noting_namespace_reads(tracking[dict.__getitem__])
    lookasides = jit_ext._general_jit_lookaside_map
    lookasides[getattr] = _noting_absent(lookasides[getattr], _getattr_present)
    lookasides[hasattr] = _noting_absent(lookasides[hasattr], _hasattr_present)
    jit_ext.unpack_inputs = _adding_the_check(jit_ext.unpack_inputs)
    setup = interpreter._setup_frame_and_run_python_function
    interpreter._setup_frame_and_run_python_function = _noting_defaults(setup)
