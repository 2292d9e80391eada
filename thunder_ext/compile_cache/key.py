"""What names a compilation in the compile cache: everything its trace depends on that thunder's prologue does not
check.

A stored entry is a thunder cache entry, and thunder takes an entry for a call when the entry's prologue accepts the
call: the prologue checks the metadata of every tensor the trace reads (the arguments', each parameter's and
buffer's), the numbers and strings it proxied (not all the traced code read: thunder takes a module's attributes and
its config's values as constants), and thunder's cache info (grad mode, default dtype and device, autocast). What no
prologue checks is what made the trace:

- the versions: Python, torch, thunder, and the extension (its version and a digest of its own source files);
- what is compiled: the module's class, or the function;
- the executors, by name and version, in order; each transform, by its class and options (thunder's and those with a
  ``compile_cache_key()``: any other is not storable); thunder's options;
- the code: the files of the module's classes and their methods, or of the function;
- and, for each entry, the other files its trace came from (of the lines its ops were traced at, of every code
  object the interpreter ran, and of each function its programs call), checked again when the entry is loaded
  (``changed_source``).

What neither the key nor the prologue names, the Python values the traced code read (a ``None``, a length, a
closure's cell), is the state's digest, which each entry holds (``compile_cache/state.py``).

A file is named by the module that runs from it, with a digest of its content: a later process checks the file it
would run, wherever that lies (another checkout of the same package). The first five are the key (``key_of``): a
folder of the cache; the last are each entry's ``depends_on``.
``NotStorable`` where a part cannot be named: options the key cannot see would let a compilation made with other
options be reused.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import sys
import types
from pathlib import Path

import thunder
import torch
from thunder.core.symbol import Symbol
from thunder.extend import Executor

from thunder_ext.compile_cache.store import FORMAT
from thunder_ext.libraries import own_folders
from thunder_ext.thunder026.cache_entries import COMPILED, NONE, NotStorable, Program, executor_name, imported

_PRIMITIVE = (bool, int, float, str, type(None))


def key_of(cd: object) -> tuple[str, dict]:
    """The digest naming ``cd``'s compilations (thunder's compile data), and what it digests."""
    fields = {
        "format": FORMAT,
        "versions": _versions(),
        "compiled": _name_of(type(cd.fn) if isinstance(cd.fn, torch.nn.Module) else cd.fn),
        "code": _digests(_files_of_compiled(cd.fn)),
        "executors": [[executor_name(ex), str(ex.version)] for ex in cd.executors_list],
        "transforms": [_transform_key(t) for t in cd.transforms if not getattr(t, "compile_cache_skips", False)],
        "options": {
            "compile_options": _primitive("thunder's option", cd.compile_options),
            "cache": str(cd.cache_option),
            "sharp_edges": str(cd.sharp_edges),
            "language": getattr(cd.langctx, "name", type(cd.langctx).__qualname__),
            "disable_torch_autograd": cd.disable_torch_autograd_support,
            "disable_preprocessing": cd.disable_preprocessing,
            "only_execute_prims": cd.only_execute_prims,
            "debug": repr(cd.debug_options),
        },
    }
    text = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32], fields


def depends_on(key: dict, traced_files: set[str], programs: dict[str, Program | None]) -> dict[str, str]:
    """The digest of each other source the entry's trace came from than ``key``'s code: ``traced_files`` (those of
    its ops' lines) and those of the functions its programs call."""
    files = set(traced_files)
    for program in (b for p in programs.values() if p is not None for b in p.with_called()):
        for reference in program.names.values():
            if reference not in (COMPILED, NONE) and ":" in reference:
                files |= set(_files_of(imported(reference)))
    return {source: digest for source, digest in _digests(files).items() if source not in key["code"]}


def changed_source(sources: dict[str, str]) -> str | None:
    """A source of ``sources`` (as ``depends_on`` names them) that is gone or no longer has its digest in this
    process, or None."""
    for source, digest in sources.items():
        path = file_now(source)
        try:
            if path is None or _digest_of_file(path) != digest:
                return source
        except NotStorable:
            return source
    return None


def source_names(files: list[str] | set[str]) -> dict[str, str]:
    """Each file named as the module that runs from it (``module:<name>``), so that a later process finds the file
    it runs, wherever that lies; a file of no module by its path (``file:<path>``)."""
    modules = {}
    for name, module in sorted(sys.modules.items(), key=lambda item: item[0] == "__main__"):  # "__main__" last
        where = getattr(module, "__file__", None)
        if isinstance(where, str):
            modules.setdefault(where, name)
    resolved = None  # the same, each file by its real path: thousands of system calls, made only where needed
    named = {}
    for path in sorted(set(files)):
        module = modules.get(path)
        if module is None:
            resolved = resolved or {os.path.realpath(where): name for where, name in reversed(modules.items())}
            module = resolved.get(os.path.realpath(path))
        named[path] = f"module:{module}" if module else f"file:{path}"
    return named


def _digests(files: list[str] | set[str]) -> dict[str, str]:
    """Each file's digest, by its ``source_names`` name."""
    return {source: _digest_of_file(path) for path, source in source_names(files).items()}


def file_now(source: str) -> str | None:
    """The file a source names in this process: its module's, found as an import would find it."""
    kind, _, name = source.partition(":")
    if kind == "file":
        return name
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None)
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return None if spec is None else spec.origin


@functools.cache
def _versions() -> dict[str, str]:
    try:
        version = importlib.metadata.version("thunder-ext")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "python": sys.version,
        "torch": torch.__version__,
        "thunder": thunder.__version__,
        "thunder_ext": version,
        "thunder_ext_source": _source_digest(),
    }


def _source_digest() -> str:
    """A digest of the extension's source: a change to a pass changes what any trace compiles to."""
    digest = hashlib.sha256()
    for root in own_folders():
        for path in sorted(Path(root).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _name_of(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _transform_key(transform: object) -> list:
    """A transform by its class and options: its own ``compile_cache_key()``, else, for thunder's, its attributes.
    Any other transform makes the compilation not storable: what it does while a compilation runs (record, count,
    change its state) would not be done for a loaded entry."""
    name, own = type(transform).__qualname__, getattr(transform, "compile_cache_key", None)
    if callable(own):
        options = own()
    elif type(transform).__module__.partition(".")[0] == "thunder":
        options = {attr: _option(f"transform {name} {attr!r}", value) for attr, value in vars(transform).items()}
    else:
        raise NotStorable(f"transform {name} is not thunder's and has no compile_cache_key(): what it does while a "
                          "compilation runs would not be done for an entry loaded instead")  # fmt: skip
    return [_name_of(type(transform)), options]


def _option(what: str, value: object) -> object:
    """An attribute of thunder's transform as the key names it: a number, string or None; an executor or operator
    the transform makes for itself (HF's recipe's ``InplaceIndexCopyTransform``) by its names, made alike in every
    process by the same class of the same thunder. Anything else: ``NotStorable``."""
    if isinstance(value, _PRIMITIVE):
        return value
    if isinstance(value, Executor):
        return f"executor {executor_name(value)} {value.version}"
    if isinstance(value, Symbol) and value.executor is not None:
        return f"operator {value.name} of {executor_name(value.executor)}"
    raise NotStorable(f"{what} is a {type(value).__name__}, which the cache cannot key")


def _primitive(what: str, values: dict) -> dict:
    for name, value in values.items():
        if not isinstance(value, _PRIMITIVE):
            raise NotStorable(f"{what} {name!r} is a {type(value).__name__}, which the cache cannot key")
    return dict(values)


def _files_of_compiled(compiled: object) -> list[str]:
    if not isinstance(compiled, torch.nn.Module):
        return _files_of(compiled)
    classes = {cls for m in compiled.modules() for cls in type(m).__mro__}
    own = [cls for cls in classes if not cls.__module__.startswith("torch.nn.") and cls not in (object,)]
    return [f for cls in own for f in _files_of(cls)]


def _files_of(obj: object) -> list[str]:
    """The source files of a function, or of a class and the functions it defines; [] for what has none (a builtin)."""
    if isinstance(obj, type):
        module = sys.modules.get(obj.__module__)
        files = [module.__file__] if getattr(module, "__file__", None) else []
        # a method's own file: a class's methods may be assigned from elsewhere, or generated
        return files + [f for name, member in vars(obj).items() if not _made_by_dataclass(obj, name)
                        for f in _files_of(getattr(member, "__func__", member))]  # fmt: skip
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    obj = inspect.unwrap(obj) if isinstance(obj, types.FunctionType) else obj
    if not isinstance(obj, types.FunctionType):
        return []
    owner = _owner(obj)
    if owner is not None and _made_by_dataclass(owner, obj.__name__):
        return _files_of(owner)
    return [obj.__code__.co_filename]


# the methods ``dataclasses`` makes from a class's fields and options, in the class's own file (and Python's version)
_DATACLASS_METHODS = frozenset({"__init__", "__repr__", "__eq__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__",
                                "__setattr__", "__delattr__", "__getstate__", "__setstate__"})  # fmt: skip


def _made_by_dataclass(cls: type, name: str) -> bool:
    """Whether ``cls.name`` is a method ``dataclasses`` generated (its code in ``<string>``): HF's model outputs are
    dataclasses, whose ``__init__`` a program calls."""
    if not dataclasses.is_dataclass(cls) or name not in _DATACLASS_METHODS:
        return False
    return getattr(getattr(_member(cls, name), "__code__", None), "co_filename", None) == "<string>"


def _owner(fn: types.FunctionType) -> type | None:
    """The class whose member ``fn`` is, found by its module and qualified name; None if none."""
    at: object = sys.modules.get(fn.__module__)
    *path, name = fn.__qualname__.split(".")
    for part in path:
        at = getattr(at, part, None)
    return at if isinstance(at, type) and _member(at, name) is fn else None


def _member(cls: type, name: str) -> object:
    """``cls``'s own member ``name``, a function unwrapped (``dataclasses`` wraps its ``__repr__``)."""
    member = vars(cls).get(name)
    return inspect.unwrap(member) if isinstance(member, types.FunctionType) else member


@functools.cache
def _digest_cached(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _digest_of_file(path: str) -> str:
    """The digest of a source file; ``NotStorable`` where the code is in no file (generated, ``<stdin>``)."""
    try:
        st = os.stat(path)
        return _digest_cached(path, st.st_mtime_ns, st.st_size)
    except OSError:
        raise NotStorable(f"its code is in no file that can be read ({path})") from None
