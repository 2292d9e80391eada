"""The run-time halves of the rules that refuse a call before anything runs, and the errors they raise.

A pass states each rule and puts its check into the trace; the check, an operator of the PyTorch executor
(``inplace_ex``), runs on every call and raises where the call breaks the rule:

- ``check_aliased_arguments``, ``check_arguments_apart_from_state``, ``check_state_apart``: in the prologue,
  arguments that share storage as thunder cannot represent, or with a tensor the function reaches another way, and
  two tensors reached another way that share storage unknown to the trace, where either is written
  (``transforms/aliased_arguments.py``; ``AliasedArgumentsError``);
- ``check_written_arguments_need_no_grad``: in the prologue, an argument that requires grad written in place
  (``transforms/grad_argument_writes.py``; eager's ``RuntimeError`` for a leaf, ``ArgumentWriteGradientError``);
- ``check_argument_containers``: in the prologue, the call's lists, tuples and dicts are the traced call's
  (``transforms/argument_containers.py``); a ``ValueError`` here is a cache miss, not the user's error;
- ``check_dense_argument``: first in the computation, an argument an nvFuser region writes is dense
  (``transforms/regions/nvfuser.py``, rule 7; ``NonDenseWriteError``).

Kept apart from the ops that compute (``executors/torch_inplace.py``); as there, this module imports no pass.
"""

from __future__ import annotations

import base64
import enum
import functools
import keyword
import marshal
import sys
import types
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from thunder.core import prims
from thunder.core.module import get_thunder_module
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import Symbol

from thunder_ext.executors.torch_inplace import inplace_ex


def _check_operator(check: Callable[..., None]) -> Symbol:
    """``check`` (``_check_<name>``) as the operator ``check_<name>``: traced as nothing (its meta returns None, with
    ``check``'s signature), run at each call, never removed as dead code."""
    meta = functools.wraps(check)(lambda *args, **kwargs: None)
    return inplace_ex.register_operator(check.__name__.lstrip("_"), meta=meta, fn=check, tags=(prims.OpTags.DONT_DCE,))


class AliasedArgumentsError(RuntimeError):
    """Two arguments share storage in a way thunder cannot represent; nothing was run or written."""


def _layout(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)}, stride {t.stride()}, offset {t.storage_offset()}"


def _representable(first: torch.Tensor, other: torch.Tensor) -> bool:
    if first.numel() != other.numel():
        return True  # traced as itself, not as a reshape of ``first``
    if (first.shape, first.stride(), first.storage_offset()) == (other.shape, other.stride(), other.storage_offset()):
        return True
    return first.is_contiguous() and other.is_contiguous() and first.storage_offset() == other.storage_offset()


def _check_aliased_arguments(args, kwargs, computation_args, groups: str) -> None:
    """The rule of ``transforms/aliased_arguments.py``, on one call's arguments."""
    flat, _ = tree_flatten((args, kwargs))
    for group in groups.split("-"):
        first, *others = positions = [int(i) for i in group.split(",")]
        members = {id(flat[i]) for i in positions}
        applied = [i for i in positions if i < len(computation_args)]
        holding = {j for j, a in enumerate(computation_args) if id(a) in members}
        misplaced = any(id(computation_args[i]) not in members for i in applied)  # a stranger made an alias
        unseen = len(holding) > 1 and not holding <= set(applied)  # aliases traced as unrelated tensors
        if misplaced or unseen:
            raise AliasedArgumentsError(
                f"thunder_ext.jit: arguments {', '.join(map(str, positions))} (flattened positions) share storage, "
                "and thunder 0.2.6 would apply that aliasing to the wrong arguments because the function does "
                "not use every argument, so nothing was run. Pass the tensor once."
            )
        for i in others:
            if not _representable(flat[first], flat[i]):
                raise AliasedArgumentsError(
                    f"thunder_ext.jit: arguments {first} and {i} (flattened positions) share storage as different "
                    f"views ({_layout(flat[first])}; {_layout(flat[i])}). thunder would compute with one as a "
                    "reshape of the other and give wrong values, so nothing was run. Pass the base tensor and "
                    "take the view inside the function."
                )


check_aliased_arguments = _check_operator(_check_aliased_arguments)


def _storage(t: object) -> int | None:
    """Where a plain strided tensor's storage lies (None for anything else, or an empty storage: all lie at 0)."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout is not torch.strided:  # a subclass may hold none
        return None
    storage = t.untyped_storage()
    return storage.data_ptr() if storage.nbytes() else None


def _check_arguments_apart_from_state(computation_args, own: tuple[int, ...], state: tuple[int, ...],
                                      writes: dict[int, str]) -> None:  # fmt: skip
    """The second rule of ``transforms/aliased_arguments.py``, on one call: the computation's arguments at ``own``
    come from the call's, those at ``state`` from elsewhere; ``writes`` describes, by position, the first write
    into each one's storage."""
    mine: dict[int, int] = {}
    for i in own:
        if (where := _storage(computation_args[i])) is not None and (where not in mine or i in writes):
            mine[where] = i
    if not mine:
        return
    for i in state:
        j = mine.get(_storage(computation_args[i]))
        if j is not None and (what := writes.get(i) or writes.get(j)):
            raise AliasedArgumentsError(
                f"thunder_ext.jit: an argument ({_layout(computation_args[j])}) shares storage with a tensor the "
                f"function takes from elsewhere (a module's parameter or buffer, a global, a closure's cell), and "
                f"{what}, so nothing was run: the compiled program orders that write against readers of the same "
                "tensor only. Pass a copy (`.clone()`), or reach the tensor one way only."
            )


check_arguments_apart_from_state = _check_operator(_check_arguments_apart_from_state)


def _check_state_apart(computation_args, state: tuple[tuple[int, int, str], ...], writes: dict[int, str]) -> None:
    """The third rule of ``transforms/aliased_arguments.py``, on one call: ``state`` holds, for each argument of the
    computation that comes from elsewhere than the call, its position, its storage group in the trace and its name
    there; two that share storage now must be of one group, unless neither is written (``writes``, by position)."""
    first: dict[int, tuple[int, int, str]] = {}  # storage -> the first of ``state`` found on it
    for i, group, name in state:
        if (where := _storage(computation_args[i])) is None:
            continue
        j, other, other_name = first.setdefault(where, (i, group, name))
        if other != group and (what := writes.get(i) or writes.get(j)):
            raise AliasedArgumentsError(
                f"thunder_ext.jit: `{other_name}` and `{name}`, two tensors the function takes from a module or "
                f"elsewhere (not from the call's arguments), share storage, and {what}, so nothing was run: the "
                "compiled program orders that write against readers of the same tensor only. Reach the storage "
                "through one of them (a view of it in the code), or keep them apart (`.clone()`)."
            )


check_state_apart = _check_operator(_check_state_apart)


Containers = tuple  # (type's name, length or keys, ((key, Containers) of each element that is a container, ...))


def _key(k: object) -> object:
    """A dict's key as ``containers`` keeps it: a plain value, or else its object's identity (a tuple, as no plain
    key is): equal only in this process, for the same object."""
    return k if type(k) in (str, int, float, bool, type(None)) else ("id", id(k))


def containers(tree: object) -> Containers | None:
    """The list, tuple or dict ``tree`` and those nested in it, each with its type, its length (a dict: its keys, in
    order) and where in it the nested ones are; None for anything else."""
    if isinstance(tree, dict):
        size, items = tuple(map(_key, tree)), [(_key(k), v) for k, v in tree.items()]
    elif isinstance(tree, (list, tuple)):
        size, items = len(tree), enumerate(tree)
    else:
        return None
    return (type(tree).__qualname__, size, tuple((k, c) for k, v in items if (c := containers(v)) is not None))


def _held(tree: object, traced: Containers) -> bool:
    """Whether ``tree`` is a container as ``traced`` describes it, with its nested ones: only these are walked, so a
    list of tensors costs its length's comparison (each tensor the trace read is checked by thunder's prologue)."""
    name, size, nested = traced
    if type(tree).__qualname__ != name:
        return False
    if isinstance(tree, dict):
        keys = {_key(k): k for k in tree}
        return tuple(keys) == size and all(_held(tree[keys[k]], c) for k, c in nested)
    return len(tree) == size and all(_held(tree[k], c) for k, c in nested)


def _check_argument_containers(args, kwargs, traced: Containers) -> None:
    """The rule of ``transforms/argument_containers.py``, on one call."""
    if not _held((args, kwargs), traced):
        # a prologue that raises is a miss: thunder tries its next entry, or compiles this call
        raise ValueError(f"the arguments' lists, tuples and dicts are not the traced call's: {traced}")


check_argument_containers = _check_operator(_check_argument_containers)


_PLAIN = (type(None), bool, int, float, complex, str, bytes)
_BY_REPR = (torch.dtype, torch.device, torch.layout, torch.memory_format, enum.Enum)


def _name(obj: object) -> str:
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', None) or getattr(obj, '__name__', '?')}"


def python_value(value: object) -> str:
    """``value`` as a prologue check of ``thunder026/python_guards.py`` compares it from call to call: a plain value
    by its type and ``repr`` (-0.0 is not 0.0); a list, tuple, set or dict by its type, length, string keys and
    plain items (others by their type: a path reads them, where the code reads them); a function by its name and
    first line, a bound method by its function, a partial by its parts, a class by its name; a tensor as such (the
    prologue checks its metadata); any other object by its class (a path reads what the code reads of it)."""
    kind = type(value)
    if kind in _PLAIN:
        return f"{kind.__name__}:{value!r}"
    if isinstance(value, _BY_REPR):
        return repr(value)
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, dict):
        parts = [f"{python_value(k) if type(k) is str else type(k).__name__}={_item(v)}" for k, v in value.items()]
        return f"{_name(kind)}[{len(value)}]({', '.join(parts)})"
    if isinstance(value, (list, tuple, set, frozenset)):
        parts = map(_item, value) if isinstance(value, (list, tuple)) else sorted(map(_item, value))
        return f"{_name(kind)}[{len(value)}]({', '.join(parts)})"
    if isinstance(value, types.FunctionType):
        return f"function {_name(value)}:{value.__code__.co_firstlineno}"
    if isinstance(value, types.MethodType):
        return f"method of {python_value(value.__func__)}"
    if isinstance(value, functools.partial):
        keywords = ", ".join(f"{k}={python_value(v)}" for k, v in sorted(value.keywords.items()))
        args = ", ".join(map(python_value, value.args))
        return f"partial({python_value(value.func)}; {args}; {keywords})"
    if isinstance(value, type):
        return f"class {_name(value)}"
    if isinstance(value, (types.BuiltinFunctionType, types.ModuleType)):
        return f"{kind.__name__} {_name(value) if not isinstance(value, types.ModuleType) else value.__name__}"
    return f"object of {_name(kind)}"


def _item(value: object) -> str:
    return python_value(value) if type(value) in _PLAIN or isinstance(value, _BY_REPR) else type(value).__name__


def expect(value: object) -> tuple:
    """What a check of ``thunder026/python_guards.py`` expects of ``value``, as literals (a saved prologue holds
    them): None and the booleans by identity, an integer or string by type and value, a float by its ``hex`` (-0.0 is
    not 0.0), bytes and a complex number by their ``repr``; a container of plain items (and keys) by its
    ``python_value``, a dict of others by its class and string keys, any other container by its class and length; a
    plain object by its class; anything else (a function, a class) by its ``python_value``. Items and attributes are
    checked as the code reads them, by their own paths."""
    kind = type(value)
    if value is None or kind is bool:
        return ("is", value)
    if kind is float:
        return ("float", value.hex())
    if kind in (int, str):
        return ("plain", kind.__name__, value)
    if kind in (bytes, complex):  # by ``repr``: neither prints in a program text (bytes)
        return ("repr", kind.__name__, repr(value))
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        items = [*value, *value.values()] if isinstance(value, dict) else value
        if value and all(type(x) is str for x in items) and not isinstance(value, dict):
            unordered = isinstance(value, (set, frozenset))
            return ("strings", _name(kind), unordered, tuple(sorted(value)) if unordered else tuple(value))
        if value and all(type(x) in _PLAIN or isinstance(x, _BY_REPR) for x in items):
            return ("value", python_value(value))
        if value and isinstance(value, dict) and all(type(k) is str for k in value):
            return ("keys", _name(kind), tuple(value))  # (not numbers: a hook's key is its handle's id)
        return ("len", _name(kind), len(value))
    if python_value(value).startswith("object of "):
        return ("class", _name(kind))
    return ("value", python_value(value))


def whole_value(value: object, depth: int = 3) -> str:
    """``value`` with what it holds, to ``depth`` levels: a container's items, a plain object's attributes, a
    function's closure cells and defaults, a bound method's object, a partial's parts, each by ``whole_value``; else
    as ``python_value``. For a value whose parts no path reads again (a function's default)."""
    if depth == 0 or isinstance(value, torch.Tensor):
        return python_value(value)
    inner = functools.partial(whole_value, depth=depth - 1)
    if isinstance(value, dict):
        return f"{_name(type(value))}{{{', '.join(f'{k!r}: {inner(v)}' for k, v in value.items())}}}"
    if isinstance(value, (list, tuple)):
        return f"{_name(type(value))}[{', '.join(map(inner, value))}]"
    if isinstance(value, types.FunctionType):
        cells = [_cell(c) for c in value.__closure__ or ()]
        return (f"{python_value(value)}(cells {inner(cells)}, defaults {inner(value.__defaults__)}, "
                f"keyword defaults {inner(value.__kwdefaults__)})")  # fmt: skip
    if isinstance(value, types.MethodType):
        return f"method {inner(value.__func__)} of {inner(value.__self__)}"
    if isinstance(value, functools.partial):
        return f"partial({inner(value.func)}; {inner(value.args)}; {inner(value.keywords)})"
    if python_value(value).startswith("object of ") and isinstance(getattr(value, "__dict__", None), dict):
        return f"{python_value(value)}({inner(dict(vars(value)))})"
    return python_value(value)


def _cell(cell: types.CellType) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # empty
        return types.CellType


def expect_whole(value: object) -> tuple:
    """What a check expects of a value checked whole (``whole_value``)."""
    return ("whole", whole_value(value))


_CLASS_NAMES: dict[type, str] = {}


def _class_name(value: object) -> str:
    kind = type(value)
    name = _CLASS_NAMES.get(kind)
    if name is None:
        name = _CLASS_NAMES[kind] = _name(kind)
    return name


def _predicate(var: str, expected: tuple, classes: dict[type, str]) -> str:
    """``expected`` of the value in ``var`` as a Python expression; a class it names is compared by identity where it
    imports (into ``classes``), else by name."""
    kind, *what = expected
    if kind == "is":
        return f"{var} is {what[0]!r}"
    if kind == "float":
        return f"type({var}) is float and {var}.hex() == {what[0]!r}"
    if kind == "plain":
        return f"type({var}) is {what[0]} and {var} == {what[1]!r}"
    if kind == "repr":
        return f"type({var}) is {what[0]} and repr({var}) == {what[1]!r}"
    if kind == "value" and what[0].startswith("class ") and (cls := _class_named(what[0][6:])) is not None:
        return f"{var} is {classes.setdefault(cls, f'_class{len(classes)}')}"  # a class, by identity where it imports
    if kind == "value":
        return f"python_value({var}) == {what[0]!r}"
    if kind == "whole":
        return f"whole_value({var}) == {what[0]!r}"
    cls = _class_named(what[0])
    if cls is None:
        same_class = f"_class_name({var}) == {what[0]!r}"
    else:
        same_class = f"type({var}) is {classes.setdefault(cls, f'_class{len(classes)}')}"
    if kind == "keys":
        return f"{same_class} and tuple({var}) == {what[1]!r}"
    if kind == "len":
        return f"{same_class} and not {var}" if what[1] == 0 else f"{same_class} and len({var}) == {what[1]!r}"
    if kind == "strings":
        items = f"tuple(sorted({var}))" if what[1] else f"tuple({var})"
        return f"{same_class} and all(type(x) is str for x in {var}) and {items} == {what[2]!r}"
    return same_class


def _class_named(name: str) -> type | None:
    """The class ``module.qualname`` names, where its module is imported and the name reaches it."""
    module, _, qualname = name.rpartition(".")
    while module and module not in sys.modules:
        module, _, head = module.rpartition(".")
        qualname = f"{head}.{qualname}"
    at: object = sys.modules.get(module)
    for part in qualname.split("."):
        at = getattr(at, part, None)
    return at if isinstance(at, type) and _name(at) == name else None


# where a check's path starts: a root of the prologue's call, a module's globals by its name, or ("thunder module",
# i): the ThunderModule compiling root i
Root = int | str | tuple[str, int]


def _guard_source(spec: tuple) -> tuple[str, dict[type, str]]:
    """The function that reads each value of ``spec`` again, each prefix of a path once, and returns the indices of
    those that differ (none: the call holds; all of them, so that a compilation drops every check its interpreter
    read otherwise at one compile of the text, ``failing``); and the classes it names, each by the name it gives it.
    Where blocks of a module list are checked one after another by the same steps (a replayed block's checks are
    its first block's), it reads them in one loop over the blocks, in the same order: the text of 80 layers' checks
    one after another took 0.4 s to compile, which the loop's text, of one block's checks, does not grow with."""
    text = _GuardText()
    for part in _parts(spec):
        if isinstance(part, _Loop):
            text.loop(part)
        else:
            root, steps, expected = spec[part]
            text.check(text.var(root, steps), expected, str(part))
    text.lines.append("    return differ")
    return "\n".join(text.lines), text.classes


@dataclass(frozen=True)
class _Loop:
    """Checks of consecutive blocks of one module list (``root``, then ``container``: the list's ``_modules``) that
    read by the same steps: block ``keys[n]``'s checks are ``starts[n]`` onwards, one for each of ``body``'s steps
    (from the block) and expectations (the first block's), but that check ``varying[m]`` of block ``n`` expects
    ``values[n][m]`` as its last part (a layer's own index, its own entry of a table)."""

    root: Root
    container: tuple
    keys: tuple[str, ...]
    starts: tuple[int, ...]
    body: tuple[tuple[tuple, tuple], ...]
    varying: tuple[int, ...]
    values: tuple[tuple, ...]


# the expectations whose last part, a literal, a loop may read from a variable of each block's (``_predicate``)
_VARYING = frozenset({"plain", "float", "repr", "keys", "strings", "whole"})


def _fixed(expected: tuple) -> tuple:
    """``expected`` without the part a loop may read from a variable of each block's: the literal last part of a
    value's expectation (``_VARYING``), the key of the last step of a same object's path (a block's own entry)."""
    if expected[0] in _VARYING:
        return expected[:-1]
    if expected[0] == "same" and expected[2][-1:] and expected[2][-1][0] == "item":
        return (*expected[:2], expected[2][:-1])
    return expected


def _with_own(expected: tuple, own: object) -> tuple:
    """``expected`` with ``own`` for the part ``_fixed`` leaves out."""
    if expected[0] in _VARYING:
        return (*expected[:-1], own)
    return (*expected[:2], (*expected[2][:-1], ("item", own)))


def _own(expected: tuple) -> object:
    return expected[-1] if expected[0] in _VARYING else expected[2][-1][1]


def _block_step(steps: tuple) -> int | None:
    """Where ``steps`` first reach a numbered child of a module (its ``_modules``, then an item such as ``'3'``)."""
    for i in range(1, len(steps)):
        kind, key = steps[i]
        if kind == "item" and type(key) is str and key.isdigit() and steps[i - 1] == ("attr", "_modules"):
            return i
    return None


def _shape(body: list[tuple[tuple, tuple]]) -> str:
    """A block's checks as the loop's text prints them, but the last part of an expectation a loop may vary."""
    return repr([(steps, _fixed(expected)) for steps, expected in body])


@dataclass
class _Run:
    """Consecutive checks ``first`` to ``end`` of one block (``module_list``: the root and steps of its list's
    ``_modules``; ``key``), each as its steps from the block and its expectation; or one check that reads from no
    block (``module_list`` None)."""

    first: int
    end: int
    module_list: tuple | None
    key: str | None
    body: list[tuple[tuple, tuple]]


def _parts(spec: tuple) -> list[int | _Loop]:
    """``spec``'s checks in order, each by its index, but a ``_Loop`` for each run of two blocks or more whose checks
    print the same but for the block's key and the values a loop may vary (compared as printed: the guard's text
    prints keys and values)."""
    runs: list[_Run] = []
    for i, (root, steps, expected) in enumerate(spec):
        at = _block_step(steps)
        if at is None:
            runs.append(_Run(i, i + 1, None, None, []))
            continue
        where, key, check = (root, steps[:at]), steps[at][1], (steps[at + 1 :], expected)
        if runs and (runs[-1].module_list, runs[-1].key) == (where, key):
            runs[-1].end = i + 1
            runs[-1].body.append(check)
        else:
            runs.append(_Run(i, i + 1, where, key, [check]))
    parts: list[int | _Loop] = []
    j = 0
    while j < len(runs):
        first, k = runs[j], j + 1
        if first.module_list is not None:
            shape = _shape(first.body)
            while k < len(runs) and runs[k].module_list == first.module_list and _shape(runs[k].body) == shape:
                k += 1
        if k - j > 1:
            group = runs[j:k]
            printed = [[repr(expected) for _, expected in r.body] for r in group]
            varying = tuple(m for m in range(len(first.body)) if len({p[m] for p in printed}) > 1)
            values = tuple(tuple(_own(r.body[m][1]) for m in varying) for r in group)
            keys, starts = tuple(r.key for r in group), tuple(r.first for r in group)
            parts.append(_Loop(*first.module_list, keys, starts, tuple(first.body), varying, values))
        else:
            parts.extend(range(first.first, first.end))
        j = k
    return parts


class _Named:
    """A value a loop reads from a variable, printed as the variable's name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_IN_BLOCK = object()  # the root of a loop's paths: the block it is at


class _GuardText:
    """A guard's lines as they are written, with a name for each path read so far where the line being written
    sees it (a loop's own names end with it)."""

    def __init__(self) -> None:
        # builtins as arguments' defaults: local loads, not global lookups, thousands of times a call
        self.lines = ["def guard(roots, type=type, len=len, tuple=tuple, sorted=sorted):", "    differ = []"]
        self.names: dict[tuple, str] = {}
        self.classes: dict[type, str] = {}
        self.indent = "    "
        self.made = 0

    def var(self, root: Root | object, steps: tuple) -> str:
        at = (root,)
        if at not in self.names:
            if isinstance(root, tuple):  # the ThunderModule of a root (the prologue runs with its compile data)
                read = f"get_thunder_module(roots[{root[1]}])"
            elif isinstance(root, int):
                read = f"roots[{root}]"
            else:
                read = f"vars(sys.modules[{root!r}])"
            self._name(at, read)
        for kind, key in steps:
            prefix = (*at, (kind, key))
            if prefix not in self.names:
                if kind == "attr" and key.isidentifier() and not keyword.iskeyword(key):
                    read = f"{self.names[at]}.{key}"  # a load, cheaper than a call of getattr
                else:
                    read = {"attr": "getattr({}, {!r})", "item": "{}[{!r}]", "has": "hasattr({}, {!r})",
                            "nth": "list({}.values())[{!r}]"}[kind]  # fmt: skip
                    read = read.format(self.names[at], key)
                self._name(prefix, read)
            at = prefix
        return self.names[at]

    def _name(self, path: tuple, read: str) -> str:
        self.names[path], self.made = f"v{self.made}", self.made + 1
        self.lines.append(f"{self.indent}{self.names[path]} = {read}")
        return self.names[path]

    def check(self, at: str, expected: tuple, index: str) -> None:
        test = f"{at} is {self.var(*expected[1:])}" if expected[0] == "same" else _predicate(at, expected, self.classes)
        self.lines += [f"{self.indent}if not ({test}):", f"{self.indent}    differ.append({index})"]

    def loop(self, loop: _Loop) -> None:
        container, outside = self.var(loop.root, loop.container), self.names
        values = [f"e{m}" for m in range(len(loop.varying))]
        rows = tuple((key, start, *own) for key, start, own in zip(loop.keys, loop.starts, loop.values))
        self.lines.append(f"    for {', '.join(['key', 'start', *values])} in {rows!r}:")
        self.names, self.indent = dict(outside), "        "
        self._name((_IN_BLOCK,), f"{container}[key]")
        per_block = dict(zip(loop.varying, values))
        for n, (steps, expected) in enumerate(loop.body):
            if n in per_block:
                expected = _with_own(expected, _Named(per_block[n]))
            self.check(self.var(_IN_BLOCK, steps), expected, f"start + {n}")
        self.names, self.indent = outside, "    "


def encoded(spec: tuple) -> str | tuple:
    """``spec`` as a prologue holds it: one string, which thunder prints and flattens and Python compiles at once (a
    30-layer model's spec is a literal of 92,000 leaves, which each of thunder's passes would flatten, thunder print
    three times and Python compile in 0.3 s): the spec in ``marshal``'s version 2, compressed, in base64, made and
    read back in C (80 layers: 0.03 s and 0.06 s, a text of 0.15 MB, where a JSON text took 1.0 s and 3.3 MB). marshal
    gives back each value it takes with its exact type, a NaN too, and its version 2 writes no references between
    objects, so the same checks are the same text (the compile cache stores it, under a key that pins Python's
    version); ``spec`` itself where marshal does not take it (a subclass of ``int`` or ``str``)."""
    global _last_encoded
    if (last := _last_encoded)[0] is spec:
        return last[1]
    try:
        text = base64.b64encode(zlib.compress(marshal.dumps(spec, 2))).decode("ascii")
    except ValueError:
        return spec
    _last_encoded = (spec, text)  # one assignment: a thread reads a pair, never half of one
    return text


def decoded(spec: str | tuple) -> tuple:
    """The checks of a spec as ``encoded`` gives it."""
    if isinstance(spec, str) and spec == (last := _last_encoded)[1]:
        return last[0]
    return marshal.loads(zlib.decompress(base64.b64decode(spec))) if isinstance(spec, str) else spec


# the spec ``encoded`` made a text of last, and that text: a compilation encodes its checks, then compiles the guard
# of that text and encodes what holds (the same spec, where all do), which reads and writes them again at 80 layers
# in 0.1 s; the spec kept by the very object, so that its text is its own
_last_encoded: tuple = (None, None)


# id of a spec -> the spec (kept: its id stays its own) and its guard, the most recently made last; at most
# _GUARDS_KEPT (a process that compiles without end keeps no spec forever: one made again costs a compile of it)
_GUARDS: dict[int, tuple[str | tuple, Callable]] = {}
_GUARDS_KEPT = 256


def _guard(spec: str | tuple) -> Callable:
    """The guard of a prologue's ``spec`` (the same constant at every call), made at its first call."""
    known = _GUARDS.get(id(spec))
    if known is None or known[0] is not spec:
        while len(_GUARDS) >= _GUARDS_KEPT:
            del _GUARDS[next(iter(_GUARDS))]
        known = _GUARDS[id(spec)] = (spec, _compiled_guard(spec))
    return known[1]


def _compiled_guard(spec: str | tuple) -> Callable:
    """The guard of ``encoded`` checks: of their text made once for a few texts, of a tuple each time."""
    return _compiled_text(spec) if isinstance(spec, str) else _compiled(spec)


# by the checks' text: the guard ``failing`` made for a compilation's checks serves its prologue's first call, whose
# constant is the same text, not built again (80 layers' checks: 0.15 s); a few kept, the newest. Not a spec that is
# no text (``encoded``): a key equal to another may print otherwise (a str subclass), and the guard prints its keys
@functools.lru_cache(maxsize=4)
def _compiled_text(spec: str) -> Callable:
    return _compiled(decoded(spec))


def _compiled(spec: tuple) -> Callable:
    source, classes = _guard_source(spec)
    namespace = {"sys": sys, "_class_name": _class_name, "python_value": python_value, "whole_value": whole_value,
                 "get_thunder_module": get_thunder_module}  # fmt: skip
    namespace.update((name, cls) for cls, name in classes.items())
    exec(source, namespace)
    return namespace["guard"]


def read_path(obj: object, steps: tuple) -> object:
    """What ``steps`` (``("attr" | "item" | "has" | "nth", key)``: ``nth``, a dict's value at a place) read from
    ``obj``, as a guard reads it."""
    at = obj
    for kind, key in steps:
        if kind == "has":
            at = hasattr(at, key)
        elif kind == "nth":
            at = list(at.values())[key]
        else:
            at = getattr(at, key) if kind == "attr" else at[key]
    return at


class PythonValueChanged(ValueError):
    """A value the compiled program was traced for reads otherwise now: a prologue's miss, never the user's error."""


def failing(spec: tuple, roots: tuple) -> list[int]:
    """The indices of the checks of ``spec`` that ``roots`` fail, a check that cannot read failing."""
    try:
        return _compiled_guard(encoded(spec))(roots)
    except Exception:  # noqa: BLE001  (the path that raised: the first that does not return, then the rest)
        for i in range(len(spec)):
            try:
                if _compiled(spec[i : i + 1])(roots):
                    break
            except Exception:  # noqa: BLE001
                break
        else:
            return []
        return [i, *(i + 1 + j for j in failing(spec[i + 1 :], roots))]


def _check_python_values(spec: str | tuple, *roots: object) -> None:
    """Each value of ``spec`` (``encoded`` checks ``(root, steps, expected)``: read from ``roots[root]``, from the
    globals of the module named ``root``, or from the ThunderModule of ``roots[i]`` for ``("thunder module", i)``, by
    ``steps``) is as the compilation read it (``thunder026/python_guards.py``)."""
    try:
        differ = _guard(spec)(roots)
    except Exception as e:  # a path that no longer reads: a miss
        raise PythonValueChanged(f"a Python value the program was traced for cannot be read now: {e!r}") from None
    if differ:
        root, steps, expected = decoded(spec)[differ[0]]
        raise PythonValueChanged(f"the Python value at {root}, {steps} is no longer {expected}")


check_python_values = _check_operator(_check_python_values)


class NonDenseWriteError(RuntimeError):
    """An nvFuser region would write an argument whose elements are not laid out densely (rule 7 of
    ``transforms/regions/nvfuser.py``); raised before anything runs."""


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill a block of its storage, one each, in some order of its axes."""
    expected = 1
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _check_dense_argument(t: torch.Tensor, whole: bool, name: str, where: str) -> None:
    """``t``, the argument the trace names ``name``, is laid out as the nvFuser region that writes it (at ``where``) needs: dense
    (``whole``: the region writes all of it) or contiguous (it writes a slice of it); else ``NonDenseWriteError``."""
    if t.is_contiguous() or (whole and _dense(t)):
        return
    raise NonDenseWriteError(
        f"thunder_ext.jit: {where} writes the argument `{name}` ({_layout(t)}) in an nvFuser region, which writes "
        f"{'a tensor' if whole else 'a slice of a tensor'} right only where it is {'dense' if whole else 'contiguous'}, "
        "so nothing was run. Pass a contiguous tensor, or the base tensor and take the view inside the function."
    )


check_dense_argument = _check_operator(_check_dense_argument)

LEAF_ERROR = "a leaf Variable that requires grad is being used in an in-place operation."


class ArgumentWriteGradientError(RuntimeError):
    """A differentiated write into an argument that requires grad and is no leaf, whose gradient thunder 0.2.6 would
    lose; nothing was run or written."""


def _check_written_arguments_need_no_grad(computation_args, positions: tuple[int, ...], writes: tuple[str, ...]):
    """The rule of ``transforms/grad_argument_writes.py``, on one call's arguments."""
    for i, what in zip(positions, writes):
        if not computation_args[i].requires_grad:  # thunder's prologue checks it too; the rule does not lean on that
            continue
        if computation_args[i].is_leaf:
            raise RuntimeError(
                f"thunder_ext.jit: {what}, which is a leaf that requires grad, so nothing was run: {LEAF_ERROR}"
            )
        raise ArgumentWriteGradientError(
            f"thunder_ext.jit: {what}, which requires grad: eager makes the write part of its autograd history, but "
            "thunder 0.2.6 would give its value before the write no gradient, so nothing was run. Write into a "
            "clone taken inside the function, or call it under torch.no_grad() where no gradient is wanted."
        )


check_written_arguments_need_no_grad = _check_operator(_check_written_arguments_need_no_grad)
