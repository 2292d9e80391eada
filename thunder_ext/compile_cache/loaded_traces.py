"""What a loaded entry shows of its traces: thunder's lists, compiled afresh the first time one is read.

A stored entry keeps its programs, not its traces: a bound symbol holds proxies, symbols and executors' callables,
which no later process rebuilds from text. So each list that ``thunder.last_traces`` (and ``last_prologue_traces``,
``last_epilogue_traces``, ``last_backward_traces``) returns for a loaded entry is ``LoadedTraces``: empty until
anything reads one, then, for all four at once, the traces of a fresh compilation of the entry's first call
(``thunder026.cache_entries.compiled_afresh``: traced, the passes, the executors; nothing run). They are then what a
cold process's lists are, bound symbols included. The cost is one compilation, paid at the first look instead of at
the warm start, and logged. The decisions (``thunder_ext.inplace_decisions``) are the stored ones until then, the
fresh compilation's after, so that they name the values of the traces shown: a process of another hash seed may name
some differently (thunder orders some ``update_aliases`` arguments by a set), the program being the same.

The first call is kept as ``FirstCall``: each tensor by its metadata and which tensors share a storage, every other
argument as it was (weakly where it can be: a loaded entry keeps no user's cache alive), and the settings thunder's
cache reads (grad mode, autocast, default dtype). Tensors of that description stand in for tensors no longer alive.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from thunder_ext.thunder026.cache_entries import ROLES, compiled_afresh
from thunder_ext.transforms import InplaceDecision

log = logging.getLogger("thunder_ext")

_AUTOCAST = ("cpu", "cuda")


@dataclass(frozen=True)
class _Tensor:
    """A tensor argument: its metadata, and the storage it shares with the call's others (an index)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool
    parameter: bool
    storage: int
    nbytes: int

    @staticmethod
    def of(t: torch.Tensor, storages: dict[tuple, int]) -> _Tensor:
        storage = t.untyped_storage()
        # an empty storage shares nothing
        where = (t.device, storage.data_ptr()) if storage.nbytes() else ("empty", len(storages))
        shared = storages.setdefault(where, len(storages))
        return _Tensor(tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad,
                       isinstance(t, torch.nn.Parameter), shared, storage.nbytes())  # fmt: skip

    def made(self, storages: dict[int, torch.UntypedStorage]) -> torch.Tensor:
        """A tensor of this description, zeros, on the storage it shares with the call's others."""
        if self.storage not in storages:
            storages[self.storage] = torch.UntypedStorage(self.nbytes, device=self.device).fill_(0)
        t = torch.empty(0, dtype=self.dtype, device=self.device)
        t.set_(storages[self.storage], self.offset, self.shape, self.stride)
        if self.parameter:
            return torch.nn.Parameter(t, requires_grad=self.requires_grad)
        return t.requires_grad_(self.requires_grad)


class FirstCall:
    """The call an entry first ran, as ``LoadedTraces`` needs it to compile the entry again."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        leaves, self.spec = tree_flatten((args, kwargs))
        tensors = {i: t for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)}
        self.described = _described(tensors.values())
        self.tensors = {i: weakref.ref(t) for i, t in tensors.items()}
        self.others = {i: (_weakly(v), type(v).__qualname__) for i, v in enumerate(leaves) if i not in tensors}
        self.grad = torch.is_grad_enabled()
        self.default_dtype = torch.get_default_dtype()
        self.autocast = {d: torch.get_autocast_dtype(d) for d in _AUTOCAST if torch.is_autocast_enabled(d)}

    def arguments(self) -> tuple[tuple, dict]:
        """The call's arguments: its own tensors where all are alive and as they were (storages shared as they
        were), else tensors of their description; ``LookError`` where another argument is gone."""
        tensors = [ref() for ref in self.tensors.values()]
        if None in tensors or _described(tensors) != self.described:
            storages: dict[int, torch.UntypedStorage] = {}
            tensors = [described.made(storages) for described in self.described]
        leaves = dict(zip(self.tensors, tensors))
        for i, (value, kind) in self.others.items():
            leaves[i] = value()
            if leaves[i] is None and isinstance(value, weakref.ref):
                raise LookError(f"its first call's {kind} argument is gone")
        return tree_unflatten([leaves[i] for i in range(len(leaves))], self.spec)

    @contextlib.contextmanager
    def settings(self) -> Iterator[None]:
        """thunder's cache reads these: as at the first call."""
        kept = torch.get_default_dtype()
        torch.set_default_dtype(self.default_dtype)
        try:
            with torch.set_grad_enabled(self.grad), contextlib.ExitStack() as stack:
                for device, dtype in self.autocast.items():
                    stack.enter_context(torch.autocast(device, dtype=dtype))
                yield
        finally:
            torch.set_default_dtype(kept)


class LookError(RuntimeError):
    """A loaded entry's traces could not be compiled afresh."""


class LoadedTraces(list):
    """thunder's list of one role's traces for a loaded entry: filled at the first read of any of its entry's
    lists (``Look.fill``). ``decisions``: the computation's stored decisions, read without compiling."""

    def __init__(self, look: Look, decisions: list[InplaceDecision]) -> None:
        super().__init__()
        self.look, self.decisions = look, decisions


def _filled_first(name: str) -> Callable:
    method = getattr(list, name)

    def read(self: LoadedTraces, *args, **kwargs):
        self.look.fill()
        return method(self, *args, **kwargs)

    read.__name__ = name
    return read


_READS = ("__getitem__", "__iter__", "__len__", "__reversed__", "__contains__", "__repr__", "__eq__", "__ne__",
          "__lt__", "__le__", "__gt__", "__ge__", "__add__", "__mul__", "__rmul__", "count", "index", "copy")
for _name in _READS:
    setattr(LoadedTraces, _name, _filled_first(_name))


class Look:
    """The four lists of one loaded entry, and what fills them: its compiled function and first call."""

    def __init__(self, jitted: Callable[[], object], name: str, path: Path, decisions: list[InplaceDecision]) -> None:
        self.jitted, self.name, self.path = jitted, name, path
        self.lists = {role: LoadedTraces(self, decisions if role == "computation" else []) for role in ROLES}
        self.first_call: FirstCall | None = None
        self.filled = False

    def record(self, args: tuple, kwargs: dict) -> None:
        self.first_call = FirstCall(args, kwargs)

    def fill(self) -> None:
        """Compiles the first call afresh and puts each role's traces in its list; once."""
        if self.filled:
            return
        jitted = self.jitted()
        if self.first_call is None or jitted is None:
            raise LookError(f"the traces of {self.name} (loaded from the compile cache, {self.path}) are compiled "
                            "afresh for its first call: it has not run, or its compiled function is gone")  # fmt: skip
        start = time.perf_counter()
        try:
            args, kwargs = self.first_call.arguments()
            with self.first_call.settings():
                entry = compiled_afresh(jitted, args, kwargs)
        except LookError as e:
            raise LookError(f"the traces of {self.name} (loaded from the compile cache, {self.path}) are compiled "
                            f"afresh for its first call, and {e}: call it again and look then") from None  # fmt: skip
        fresh = dict(zip(ROLES, (entry.prologue_traces, entry.computation_traces, entry.epilogue_traces,
                                 entry.backward_traces)))  # fmt: skip
        for role, traces in self.lists.items():
            list.extend(traces, fresh[role])
        self.filled = True
        log.info("thunder_ext: %s was loaded from the compile cache (%s), which keeps no traces: compiled it afresh "
                 "to show them, in %.1f s", self.name, self.path, time.perf_counter() - start)  # fmt: skip


def _described(tensors) -> list[_Tensor]:
    storages: dict[tuple, int] = {}
    return [_Tensor.of(t, storages) for t in tensors]


def _weakly(value: object) -> Callable[[], object]:
    """What gives ``value`` back: a weak reference where one can be made."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value
