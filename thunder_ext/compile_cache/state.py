"""The Python state a compilation may have read, as one digest: a stored entry runs only where it is the same.

thunder's prologue checks the tensors a trace reads and most numbers and strings, but not every value that steered
the Python it interpreted: a ``None`` (``if config.softcapping is not None``), the length of what it iterated (a
``ModuleList`` of 4 blocks or 16), which class or function an attribute holds (``Tanh`` or ``Sigmoid``, a hook, a
closure's cell), a default argument. Within one jitted object that is thunder's cache, as in stock thunder; across
objects and processes it is the compile cache's, which must not run one program for another.

Rule: an entry is saved with the digest of everything reachable from what was compiled, taken when it compiled
(before the call ran), and a loaded entry runs for a call only where the digest taken at that call is equal
(``compile_cache/attach.py``). What is reached:

- a module tree: each module's class and every entry of its ``__dict__`` (its children, configs, flags, and hooks,
  keyed by their order, not by their handles' ids, which count the process's hooks);
- an object: its class and its ``__dict__`` (and ``__slots__``); containers by their items in order; dataclasses
  alike; a class of the user's: everything it defines, methods as functions; a module of the user's: its attributes;
- a function: its code (bytecode, constants, names; not its file or lines), its closure's cells, its defaults, and
  each global its code names (every global, where it calls ``globals()`` or ``vars()``); a bound method: its object
  and its function; ``functools.partial``: its function, arguments and keywords;
- an object's attribute that an integration says Python seeds per process (``HOOKS.state_seeded``: HF's
  ``GenerationConfig._original_object_hash``, a ``hash()`` of its text): left out, or no process would load an
  entry another saved; a traced read of it is a Python guard's to check;
- a tensor: that it is one (and a ``Parameter`` or not); its metadata is the prologue's to check, so a cache that
  grows does not change the digest;
- by name alone, what the key or the versions pin: a module, class or function of a file of an installed package
  (``site-packages``), of Python's own library or of the extension, a builtin; and dtypes, devices, enums, numbers,
  strings.

Anything else (an object with no ``__dict__`` that is none of these) raises ``NotStorable``: the compilation is not
saved, and the log says which attribute. So two objects of equal digests run the same Python on the same values,
but for the tensors, which thunder's prologue checks.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Iterator

import torch

from thunder_ext.hooks import HOOKS
from thunder_ext.libraries import in_library
from thunder_ext.thunder026.cache_entries import NotStorable

_PRIMITIVE = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis))
_BY_NAME = (types.ModuleType, types.BuiltinFunctionType, types.BuiltinMethodType, types.WrapperDescriptorType,
            types.MethodDescriptorType, types.MethodWrapperType, torch.dtype, torch.device, torch.layout)  # fmt: skip
# a lock's state (held or not) steers no traced code, and its repr names its owner: by its type alone
_BY_TYPE = (type(threading.Lock()), type(threading.RLock()))


def state_digest(obj: object) -> str:
    """The digest of ``obj``'s state as the module docstring states it; ``NotStorable`` naming what it cannot name."""
    digest = hashlib.sha256()
    for token in _State().tokens(obj, "the compiled object"):
        digest.update(token.encode() + b"\0")
    return digest.hexdigest()


def _name(obj: object) -> str:
    return f"{getattr(obj, '__module__', None) or ''}:{getattr(obj, '__qualname__', None) or repr(obj)}"


class _State:
    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # id -> order of first visit: a shared object or a cycle is named by that
        self.alive: list[object] = []  # what was seen, so that no id is reused while digesting

    def tokens(self, obj: object, where: str) -> Iterator[str]:
        if isinstance(obj, _PRIMITIVE):
            yield f"{type(obj).__name__}:{obj!r}"
            return
        if isinstance(obj, torch.Tensor):
            yield "parameter" if isinstance(obj, torch.nn.Parameter) else "tensor"
            return
        if isinstance(obj, _BY_TYPE):
            yield type(obj).__name__
            return
        if isinstance(obj, types.ModuleType) and not in_library(obj):
            pass  # a module of the user's: by its attributes, below
        elif isinstance(obj, _BY_NAME) or isinstance(obj, enum.Enum):
            yield f"{type(obj).__name__}:{_name(obj) if isinstance(obj, types.ModuleType) else repr(obj)}"
            return
        if isinstance(obj, (types.FunctionType, type)) and in_library(obj):
            yield f"library {type(obj).__name__}:{_name(obj)}"
            return
        if id(obj) in self.seen:
            yield f"seen:{self.seen[id(obj)]}"
            return
        self.seen[id(obj)] = len(self.seen)
        self.alive.append(obj)
        if not isinstance(obj, type):
            yield "of"
            yield from self.tokens(type(obj), f"{where}'s class")
        yield from self._parts(obj, where)

    def _parts(self, obj: object, where: str) -> Iterator[str]:
        if isinstance(obj, (list, tuple, set, frozenset)):
            items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
            yield f"len:{len(items)}"
            for i, item in enumerate(items):
                yield from self.tokens(item, f"{where}[{i}]")
        elif isinstance(obj, (dict, types.MappingProxyType)):
            yield f"len:{len(obj)}"
            for key, value in obj.items():
                yield from self.tokens(key, f"{where} key")
                yield from self.tokens(value, f"{where}[{key!r}]")
        elif isinstance(obj, type):  # a class of the user's: its name, and all it defines (methods as functions)
            yield f"class:{_name(obj)}"
            for name, member in sorted(vars(obj).items()):
                if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                    continue
                member = getattr(member, "__func__", None) or getattr(member, "fget", None) or member
                yield name
                yield from self.tokens(member, f"{where}.{name}")
        elif isinstance(obj, types.ModuleType):  # a module of the user's: its name and its attributes
            yield f"module:{obj.__name__}"
            yield from self._parts({k: v for k, v in vars(obj).items() if not k.startswith("__")}, where)
        elif isinstance(obj, types.FunctionType):
            yield from self._function(obj, where)
        elif isinstance(obj, types.MethodType):
            yield from self.tokens(obj.__self__, f"{where}.__self__")
            yield from self.tokens(obj.__func__, f"{where}.__func__")
        elif isinstance(obj, functools.partial):
            for part in ("func", "args", "keywords"):
                yield from self.tokens(getattr(obj, part), f"{where}.{part}")
        elif isinstance(obj, types.CodeType):
            yield from self._code(obj, where)
        elif isinstance(obj, types.CellType):
            try:
                contents = obj.cell_contents
            except ValueError:  # a cell not filled yet
                yield "empty cell"
            else:
                yield from self.tokens(contents, where)
        elif hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__"):
            if dataclasses.is_dataclass(obj) and not hasattr(obj, "__dict__"):
                values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            else:
                values = dict(getattr(obj, "__dict__", {}))
            for cls in type(obj).__mro__:
                for slot in (s for s in getattr(cls, "__slots__", ()) if s not in ("__dict__", "__weakref__")):
                    values[slot] = getattr(obj, slot, "<unset slot>")
            if isinstance(obj, torch.nn.Module):
                values = _hooks_by_order(values)
            for seeded in HOOKS.state_seeded:
                for name in seeded(obj):
                    values.pop(name, None)
            yield from self._parts(values, where)
        else:
            raise NotStorable(f"{where} is a {type(obj).__qualname__}, whose state the cache cannot name")

    def _function(self, fn: types.FunctionType, where: str) -> Iterator[str]:
        yield from self._code(fn.__code__, where)
        for part in ("__defaults__", "__kwdefaults__", "__closure__"):
            yield from self.tokens(getattr(fn, part), f"{where}.{part}")
        names = _names(fn.__code__)
        # a function that calls globals() (or vars()) may read any of them
        names = sorted(fn.__globals__ if {"globals", "vars"} & names else names & fn.__globals__.keys())
        names = [n for n in names if not n.startswith("__")]
        yield from self.tokens({n: fn.__globals__[n] for n in names}, f"{where}'s globals")

    def _code(self, code: types.CodeType, where: str) -> Iterator[str]:
        yield code.co_code.hex()
        yield " ".join((*code.co_names, "|", *code.co_varnames, "|", *code.co_freevars, "|", *code.co_cellvars))
        for const in code.co_consts:
            yield from self.tokens(const, f"{where}'s constant")


def _hooks_by_order(values: dict) -> dict:
    """A module's ``__dict__`` with each hook dict keyed by the order of its handles among the module's, not by the
    handle's id, which counts every hook the process has registered: equal modules, equal digests."""
    hooks = [k for k, v in values.items() if "hook" in k and isinstance(v, dict)]
    ids = sorted({i for k in hooks for i in values[k] if isinstance(i, int)})
    order = {i: n for n, i in enumerate(ids)}
    return {**values, **{k: {order.get(i, i): v for i, v in values[k].items()} for k in hooks}}


def _names(code: types.CodeType) -> set[str]:
    """The names a code object and those nested in it read (globals among them)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names

