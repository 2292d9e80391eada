"""A compiled function with the cache: its stored entries loaded when it is made, each new compilation saved.

Loaded entries join thunder's own list of entries, where thunder tries them as it tries those it compiled: the
first whose prologue accepts the call runs. So an entry runs only for a call its prologue accepts, in a process
whose key and code files (``compile_cache/key.py``) equal those it was compiled with, where the Python state the
compiled object reaches has the digest it had when the entry compiled (``compile_cache/state.py``, checked at the
first call the entry would take); everything else compiles.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import thunder
import torch
from thunder.core import devices, dtypes
from thunder.core.compile_data import get_compile_data
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.core.trace import TraceCtx, tracectx

from thunder_ext.compile_cache import store
from thunder_ext.compile_cache.key import changed_source, depends_on, file_now, key_of, source_names
from thunder_ext.compile_cache.loaded_traces import Look
from thunder_ext.compile_cache.state import state_digest
from thunder_ext.thunder026.cache_entries import (
    ROLES,
    NotStorable,
    Program,
    autocast_now,
    guard_of,
    interpreter_cache,
    on_each_new_entry,
    program_of,
    programs_of,
    rebuilt,
    rebuilt_entry,
    runs_its_text,
    trace_digest,
    try_first,
)
from thunder_ext.thunder026.interpreted_code import files_interpreted
from thunder_ext.thunder026.trace_programs import Pipelined
from thunder_ext.transforms import InplaceDecision, InplaceTransform

log = logging.getLogger("thunder_ext")

# what each jitted function's cache did: ``cache_loads``
_CACHES: weakref.WeakKeyDictionary[object, _Cache] = weakref.WeakKeyDictionary()


def attach(jitted: Callable, requested: bool | None = None) -> None:
    """Loads ``jitted``'s stored entries, and saves each it compiles from now on; does nothing where the cache is
    off (``store.enabled(requested)``, ``requested`` being the compilation's ``compile_cache=``), for a graph of
    Dynamo's, or where the compilation cannot be keyed (the log says why)."""
    cd = thunder.compile_data(jitted)
    # Dynamo's graphs: generated, and guarded by Dynamo
    if not store.enabled(requested) or isinstance(cd.fn, torch.fx.GraphModule):
        return
    try:
        key, fields = key_of(cd)
    except NotStorable as e:
        log.info("thunder_ext: compile cache: %s is compiled afresh in each process: %s", _name(cd.fn), e)
        return
    cache = _Cache(jitted, key, fields)
    _CACHES[jitted] = cache
    cache.load()
    on_each_new_entry(jitted, cache.save)
    transform = _inplace_transform(cd)
    if transform is not None:
        transform.block_store = _BlockStore(fields)


def cached(jitted: Callable) -> bool:
    """Whether ``jitted``'s compilations are saved to the compile cache."""
    return jitted in _CACHES


def load_new(jitted: Callable) -> int:
    """Loads the entries saved under ``jitted``'s key since it last looked (by another process: a compilation made
    ahead, ``compile_cache/ahead.py``), where thunder tries them after its own; how many. 0 without the cache."""
    cache = _CACHES.get(jitted)
    return 0 if cache is None else cache.load(last=True)


def cache_loads(jitted: Callable) -> int:
    """How many entries loaded from the compile cache ``jitted``'s calls ran (each counted at its first call, which
    ``thunder.cache_misses`` counts as it counts a compilation); 0 without the cache."""
    cache = _CACHES.get(jitted)
    return 0 if cache is None else cache.loads


class _Cache:
    def __init__(self, jitted: Callable, key: str, fields: dict) -> None:
        # weak: thunder's list of entries holds this, and thunder keeps its compiled objects free of cycles
        self.jitted = weakref.ref(jitted)
        self.key, self.fields = key, fields
        self.loads = 0
        self.known: set[Path] = set()  # the files this process loaded or saved

    def load(self, *, last: bool = False) -> int:
        """Loads the entries not known yet; ``last``: where thunder tries them after those it has. How many: 0
        where the cache verifies, since every call compiles there and ``save`` compares."""
        if store.verifying():
            return 0
        cd, loaded = thunder.compile_data(self.jitted()), 0
        # least recently used first: thunder tries the last entry first
        for stored in sorted(store.entries(self.key), key=lambda s: s.last_used):
            if stored.path in self.known:
                continue
            self.known.add(stored.path)
            start = time.perf_counter()
            try:
                entry = self._rebuilt(stored, cd, start)
            except (NotStorable, KeyError, TypeError, ValueError, SyntaxError) as e:
                log.warning("thunder_ext: compile cache: ignored and removed %s: %s", stored.path, e)
                store.remove(stored.path)
                continue
            if entry is not None:
                entries = interpreter_cache(self.jitted())
                # thunder's list saves each entry appended after a compilation; inserting one saves nothing
                entries.insert(loaded if last else len(entries), entry)
                loaded += 1
        return loaded

    def _rebuilt(self, stored: store.Stored, cd: object, start: float):
        """The entry ``stored`` holds, its prologue wrapped in ``_FirstUse``; None where its code changed."""
        payload = stored.payload
        if not _current(stored, self.fields):
            return None
        programs = {r: None if (p := payload["programs"][r]) is None else Program.loaded(p) for r in ROLES}
        look = Look(self.jitted, payload["describe"], stored.path, _decisions_here(payload))
        autocast = payload["autocast"]
        entry = rebuilt_entry(programs, cd.fn, bool(payload["return_none_instead_of_grads"]), look.lists, autocast)
        guard = None if payload["guard"] is None else rebuilt(Program.loaded(payload["guard"]), cd.fn, autocast)
        first_use = _FirstUse(entry.prologue_fn, guard, payload["state"], self, look, start)
        return entry._replace(prologue_fn=first_use)

    def save(self, entry) -> None:
        cd, cs = thunder.compile_data(self.jitted()), thunder.compile_stats(self.jitted())
        seconds = (time.perf_counter_ns() - cs.last_trace_cache_stop) / 1e9
        name = _described(cd.fn, entry)
        try:
            programs, guard = programs_of(entry, cd.fn), guard_of(entry, cd.fn)
            decisions = _decisions(cd, entry)
            traced = {b.source_filename for b in entry.computation_traces[0].bound_symbols if b.source_filename}
            # and every file whose code the interpreter ran, a helper that returned a number included; code made at
            # run time (a dataclass's __init__, "<string>") has no file, and is in the state's digest where it counts
            traced |= {f for f in files_interpreted(cd) if os.path.isfile(f)}
            payload = {
                "key": self.fields,
                "describe": name,
                "depends_on": depends_on(self.fields, traced, programs),
                "state": state_digest(cd.fn),  # as the call that compiled found it: nothing of it has run yet
                "programs": {r: None if p is None else dataclasses.asdict(p) for r, p in programs.items()},
                "guard": None if guard is None else dataclasses.asdict(guard),
                "decisions": [dataclasses.asdict(d) for d in decisions],
                "decision_files": source_names({d.source.partition(":")[0] for d in decisions if d.source}),
                "return_none_instead_of_grads": bool(entry.return_none_instead_of_grads),
                "autocast": autocast_now(),  # as when thunder built the programs: within this call
            }
        except NotStorable as e:
            log.info("thunder_ext: compiled %s in %.1f s; not saved to the compile cache: %s", name, seconds, e)
            return
        stored = _saved(self.key, name, seconds, payload)
        if stored is not None:
            self.known.add(stored.path)


def _current(stored: store.Stored, fields: dict) -> bool:
    """Whether ``stored`` holds a compilation of the key ``fields`` from the code this process runs: one whose code
    changed is removed (False); a file of another key (another compilation, or another version) is damaged
    (``ValueError``, which the caller logs as it removes the file)."""
    if stored.payload.get("key") != fields:
        raise ValueError("it was saved for another compilation (its key differs)")
    changed = changed_source(stored.payload["depends_on"])
    if changed is not None:
        log.info("thunder_ext: compile cache: removed %s: %s changed since it was saved", stored.path, changed)
        store.remove(stored.path)
    return changed is None


def _decisions_here(payload: dict) -> list[InplaceDecision]:
    return [_here(InplaceDecision(**d), payload["decision_files"]) for d in payload["decisions"]]


def _saved(key: str, name: str, seconds: float, payload: dict) -> store.Stored | None:
    """Saves ``payload``, the compilation of ``name`` in ``seconds``, under ``key`` (where the cache verifies, says
    whether the entry stored is this compilation instead); what was stored, with a log line."""
    if store.verifying():
        _verify(key, name, payload)
        return None
    try:
        stored = store.save(key, payload)
        store.evict()
    except OSError as e:  # a full disk, a folder made read-only: the compilation still runs
        log.warning("thunder_ext: compiled %s in %.1f s; not saved to the compile cache: %s", name, seconds, e)
        return None
    if stored is not None:
        size = stored.size / 2**20
        log.info("thunder_ext: compiled %s in %.1f s, saved to the compile cache (%.1f MB)", name, seconds, size)
    return stored


def _verify(key: str, name: str, payload: dict) -> None:
    """Says whether an entry stored for the call ``name`` holds this compilation (``_comparable``), or in which
    fields it differs: the programs by role, the decisions, the files it depends on, its guard."""
    fresh = _comparable(json.loads(json.dumps(payload, sort_keys=True)))  # as stored: tuples as lists
    stored = [(s.path, _comparable(s.payload)) for s in store.entries(key) if s.payload["describe"] == name]
    if not stored:
        log.info("thunder_ext: compile cache verify: %s: no entry is stored for this call", name)
    elif any(s == fresh for _, s in stored):
        log.info("thunder_ext: compile cache verify: %s: the stored entry is this compilation", name)
    else:
        for path, s in stored:
            differ = [f"programs.{role}" for role in fresh["programs"]
                      if s["programs"].get(role) != fresh["programs"][role]]  # fmt: skip
            differ += [k for k in fresh if k != "programs" and s.get(k) != fresh[k]]
            log.warning("thunder_ext: compile cache verify: %s: the stored entry %s differs from this "
                        "compilation in %s", name, path, ", ".join(differ))  # fmt: skip


class _BlockStore:
    """The compile cache's block programs (``thunder_ext/regional/programs.py``): each stored apart from the entries
    of the models that call it, under a key of everything its compilation read: the block's traced ops
    (``trace_digest``: each op with its arguments' metadata, subsymbols and user's line), the model's compilation
    (its key: versions, executors, transforms, options), grad mode and autocast. Another model of the same blocks (a
    deeper one) traces the same ops, so loads the program instead of compiling it; ops that differ in anything the
    digest names miss. A block's program takes its module's tensors as arguments and names no compiled object
    (``None`` below: one that did would not be storable). Under grad it is a forward and a backward, stored with the
    metadata of what the forward saves and of each gradient the backward gives (``Pipelined``), from which a call's
    grad transform makes its outputs' proxies."""

    def __init__(self, fields: dict) -> None:
        self.fields = fields

    def key(self, computation) -> tuple[str, dict] | None:
        try:
            traced = trace_digest(computation)
        except NotStorable as e:
            log.info("thunder_ext: compile cache: %s is compiled afresh in each process: %s", computation.fn_name, e)
            return None
        grad = get_compile_data().is_grad_enabled
        fields = {**self.fields, "block": traced, "grad": grad, "autocast": autocast_now()}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32], fields

    def load(self, key: tuple[str, dict]) -> tuple[Pipelined, list[InplaceDecision]] | None:
        if store.verifying():  # each compiles, and its save compares
            return None
        for stored in sorted(store.entries(key[0]), key=lambda s: s.last_used, reverse=True):
            start, payload = time.perf_counter(), stored.payload
            try:
                if not _current(stored, key[1]):
                    continue
                runs = {role: None if p is None else rebuilt(Program.loaded(p), None, payload["autocast"])
                        for role, p in payload["programs"].items()}  # fmt: skip
                with tracectx(TraceCtx()):  # the proxies of what the forward saves and the backward gives
                    saved = tuple(_proxy(meta) for meta in payload["saved"])
                    grads = tuple((i, _proxy(meta)) for i, meta in payload["grads"])
                built = Pipelined(runs["computation"], [], runs["backward"], saved, grads)
                decisions = _decisions_here(payload)
            except (NotStorable, KeyError, TypeError, ValueError, SyntaxError) as e:
                log.warning("thunder_ext: compile cache: ignored and removed %s: %s", stored.path, e)
                store.remove(stored.path)
                continue
            store.mark_used(stored.path)
            log.info("thunder_ext: loaded %s from the compile cache in %.2f s", payload["describe"],
                     time.perf_counter() - start)  # fmt: skip
            return built, decisions
        return None

    def save(self, key: tuple[str, dict], name: str, seconds: float, built: Pipelined,
             decisions: list[InplaceDecision]) -> None:  # fmt: skip
        try:
            backward = None if built.backward is None else program_of(built.backward, None)
            programs = {"computation": program_of(built.run, None), "backward": backward}
            payload = {
                "key": key[1],
                "describe": name,
                "depends_on": depends_on(self.fields, set(), programs),
                "programs": {role: dataclasses.asdict(p) if p is not None else None for role, p in programs.items()},
                "saved": [_proxy_meta(p) for p in built.saved],
                "grads": [(i, _proxy_meta(g)) for i, g in built.grads],
                "guard": None,
                "decisions": [dataclasses.asdict(d) for d in decisions],
                "decision_files": source_names({d.source.partition(":")[0] for d in decisions if d.source}),
                "autocast": autocast_now(),
            }
        except NotStorable as e:
            log.info("thunder_ext: compiled %s in %.1f s; not saved to the compile cache: %s", name, seconds, e)
            return
        _saved(key[0], name, seconds, payload)


def _proxy_meta(p: TensorProxy) -> list:
    """What a block program's forward saves, or its backward gives, as the store keeps it: a tensor's metadata."""
    return [list(p.shape), str(dtypes.to_torch_dtype(p.dtype)), p.device.device_str(), p.requires_grad]


def _proxy(meta: list) -> TensorProxy:
    shape, dtype, device, requires_grad = meta
    return TensorProxy(shape=shape, dtype=dtypes.to_dtype(getattr(torch, dtype.removeprefix("torch."))),
                       device=devices.to_device(device), requires_grad=requires_grad)  # fmt: skip


def _comparable(payload: dict) -> dict:
    """What of an entry runs, wherever the code lies: each file its decisions name by the module that runs from it
    (the user's lines are in the programs' checks and comments, and another checkout's paths differ), the programs
    without their comment lines, and each program's bytecode by whether it is its text's compilation (marshal's
    bytes differ between processes)."""

    def named(text: str) -> str:
        for path, name in payload["decision_files"].items():
            text = text.replace(path, name)
        return text

    def program(p: dict | None) -> dict | None:
        if p is None:
            return None
        text = "\n".join(line for line in named(p["text"]).splitlines() if not line.lstrip().startswith("#"))
        called = {kind: {name: program(c) for name, c in p[kind].items()} for kind in ("blocks", "regions")}
        return {**p, "text": text, "code": runs_its_text(Program.loaded(p)), **called}

    programs = {role: program(p) for role, p in payload["programs"].items()}
    decisions = [{**d, "source": named(d["source"] or "")} for d in payload["decisions"]]
    return {**payload, "programs": programs, "guard": program(payload["guard"]), "decisions": decisions,
            "decision_files": None}  # fmt: skip


class _FirstUse:
    """A loaded entry's prologue, which logs the first call it accepts and marks the entry used. That first call
    must find the compiled object's Python state as the entry's compilation found it (``state``), and where the
    entry's prologue had checks pruned, every one of them (``guard``) must accept it too: the entry is then taken
    for this process's object, as it was for the one it was compiled for. Later calls are thunder's to check, as
    for an entry compiled here. The first call is kept (``look``) to compile the entry's traces afresh where they
    are looked at (``loaded_traces.py``)."""

    def __init__(self, prologue: Callable, guard: Callable | None, state: str, cache: _Cache, look: Look,
                 start: float) -> None:  # fmt: skip
        self.prologue, self.guard, self.state, self.cache, self.look = prologue, guard, state, cache, look
        self.path, self.name = look.path, look.name
        self.seconds = time.perf_counter() - start  # to read and rebuild the entry
        self.used = False

    def __call__(self, *args, **kwargs):
        result = self.prologue(*args, **kwargs)  # first: the cheap checks, on every call thunder tries this entry for
        if not self.used:
            # each raises where the call is not the entry's: thunder then tries another entry, or compiles
            jitted, start = self.cache.jitted(), time.perf_counter()
            if state_digest(thunder.compile_data(jitted).fn) != self.state:
                raise ValueError(f"{self.name}: the compiled object's Python state is not the entry's")
            checked = time.perf_counter() - start
            if self.guard is not None:
                self.guard(*args, **kwargs)
            self.used = True
            self.look.record(args, kwargs)
            try_first(jitted, self)  # loaded entries were put where thunder tries them last
            self.cache.loads += 1
            # thunder counts a hit once this prologue returns; a load is counted as a compilation, whose epilogue
            # and backward traces thunder shows (a hit sets only the computation's and the prologue's)
            stats = thunder.compile_stats(jitted)
            stats.cache_misses, stats.cache_hits = stats.cache_misses + 1, stats.cache_hits - 1
            stats.last_epilogue_traces = self.look.lists["epilogue"]
            stats.last_backward_traces = self.look.lists["backward"]
            store.mark_used(self.path)
            log.info("thunder_ext: loaded %s from the compile cache in %.2f s, its Python state checked in %.2f s",
                     self.name, self.seconds, checked)  # fmt: skip
        return result


def _here(decision: InplaceDecision, files: dict[str, str]) -> InplaceDecision:
    """``decision``, its user's line in the file this process runs (the module may lie elsewhere than where the
    entry was compiled: another checkout)."""
    path, colon, rest = decision.source.partition(":")
    now = file_now(files[path]) if path in files else None
    return decision if now is None else dataclasses.replace(decision, source=f"{now}{colon}{rest}")


def _inplace_transform(cd: object) -> InplaceTransform | None:
    return next((t for t in cd.transforms if isinstance(t, InplaceTransform)), None)


def _decisions(cd: object, entry) -> list[InplaceDecision]:
    transform = _inplace_transform(cd)
    if transform is None:
        return []
    return next((transform.decisions[t] for t in reversed(entry.computation_traces) if t in transform.decisions), [])


def _name(fn: object) -> str:
    return f"{type(fn).__name__}.forward" if isinstance(fn, torch.nn.Module) else getattr(fn, "__qualname__", repr(fn))


def _described(fn: object, entry) -> str:
    """``GPT.forward(idx: cpu i64[1, 16], input_pos: cpu i64[16], 128)``: the call's arguments as the prologue
    unpacks them."""
    shown = []
    for bsym in entry.prologue_traces[0].bound_symbols:
        if bsym.sym.name != "unpack_getitem" or getattr(bsym.args[0], "name", None) not in ("args", "kwargs"):
            continue
        keyword = f"{bsym.args[1]}=" if bsym.args[0].name == "kwargs" else ""
        if isinstance(bsym.output, TensorProxy):
            shown.append(f"{keyword}{bsym.output.name}: {bsym.output.type_string()}")
        elif isinstance(bsym.output, NumberProxy):
            shown.append(f"{keyword}{bsym.output.value!r}")
    return f"{_name(fn)}({', '.join(shown)})"
