"""thunder 0.2.6's cache entries as program texts, and back: what the compile cache on disk stores and loads.

thunder keeps what one compilation made in a ``CacheEntry`` of Python functions, each built from a final trace by
``TraceCtx.python_callable``: the trace's program text, ``exec``-ed in a dict of the objects it names (the text is
kept in ``linecache`` under the function's file name). thunder 0.2.6 cannot store an entry. Here an entry is read
back from exactly what thunder executes: each function's text and the globals it was executed in. Where every
global is something a later process can import again (a module, a function or class by module and qualified name,
an executor's operator by the two names; a block program, by its own program text; a region of thunder's
torch.compile executor, by the program text it compiles) the entry is stored as ``Program``s, each with its
bytecode, which a later process executes as thunder executes the text (compiling the text again took most of a warm
start); an entry whose programs name anything else (an nvFuser region, a tensor constant, a closure) cannot be
stored, and ``programs_of`` says why. A torch.compile region is rebuilt as thunder's ``make_compiled`` builds it, its
text given to ``torch.compile`` again: Dynamo traces it at its first call, and Inductor finds its kernels in its own
cache where this machine compiled them before.

Read or set here: ``CacheEntry``; ``CompileStats.interpreter_cache``, the list thunder's jit searches for an entry
whose prologue accepts the call (newest first) and appends each compilation's entry to; the prologue that thunder
wraps in a timer (a closure); the implementation an ``OperatorExecutor`` keeps for each operator (in a closure too);
how ``build_callable`` executes a text; ``CompileData._get_computation_and_inputs``, which compiles a call without
running it; that the torch executor's ``no_autocast`` decorator keeps the autocast state of when a program was built;
how ``make_compiled`` wraps a torch.compile region (a closure of torch.compile's function of the region's text, whose
Dynamo context holds ``fullgraph``).

Retired by: a thunder that serializes its compiled entries, or a persistent cache of its own.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import hashlib
import itertools
import inspect
import json
import linecache
import marshal
import re
import types
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import thunder
import torch
from thunder import CacheEntry
from thunder.common import transform_for_execution
from thunder.core import dtypes
from thunder.core.devices import Device
from thunder.core.proxies import NumberProxy, Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.executors.torch_compile import TorchCompileExecutor
from thunder.executors.torchex import no_autocast
from thunder.extend import Executor, OperatorExecutor, get_all_executors, get_executor
from torch._dynamo.eval_frame import OptimizeContext

from thunder_ext.gc_pause import gc_paused
from thunder_ext.thunder026.trace_programs import CalledProgram

# what thunder's program texts call ``__function_obj``: the function or module being compiled
COMPILED = "<the compiled function>"
NONE = "<None>"
ROLES = ("prologue", "computation", "epilogue", "backward")
_TOOK = re.compile(r" \(took \d+ milliseconds\)")
# an operator's implementation: ``executor:<executor's name>:<operator's name>``
_EXECUTOR = "executor:"
# thunder.jit's executor of its own for each compiled function, named with the object's id: no later process has it
_AD_HOC = re.compile(r"^__ad_hoc_executor_\d+$")


@dataclass(frozen=True)
class Program:
    """One function of a cache entry: the text thunder executes, the function it defines, and what each other name
    it uses stands for (``module:qualname`` for a function or class, ``module`` for a module, or ``COMPILED``);
    ``code``: the text compiled (``bytecode``); ``blocks``: each block program it calls
    (``thunder_ext/regional/programs.py``), by that name, as a program of its own; ``regions``: each region of
    thunder's torch.compile executor it calls, by that name, as the program ``torch.compile`` compiles, and
    ``fullgraph``: for such a region's program, torch.compile's option (None for any other program)."""

    function: str
    text: str
    names: dict[str, str]
    code: str
    blocks: dict[str, Program] = field(default_factory=dict)
    regions: dict[str, Program] = field(default_factory=dict)
    fullgraph: bool | None = None

    @classmethod
    def loaded(cls, fields: dict) -> Program:
        """The program ``dataclasses.asdict`` gave ``fields``."""
        blocks, regions = ({name: cls.loaded(p) for name, p in fields[kind].items()} for kind in ("blocks", "regions"))
        return cls(fields["function"], fields["text"], fields["names"], fields["code"], blocks, regions,
                   fields["fullgraph"])  # fmt: skip

    def with_called(self) -> Iterator[Program]:
        """This program, and the programs it calls (its blocks' and regions'), theirs too."""
        yield self
        for called in (*self.blocks.values(), *self.regions.values()):
            yield from called.with_called()


class NotStorable(Exception):
    """The entry names something a later process could not import again."""


def programs_of(entry: CacheEntry, compiled: object) -> dict[str, Program | None]:
    """Each function of ``entry`` as a ``Program`` (None where the entry has none), or ``NotStorable``.
    ``compiled`` is the function or module being compiled, which a prologue reads."""
    functions = {
        "prologue": _prologue_inside(entry.prologue_fn),
        "computation": entry.computation_fn,
        "epilogue": entry.epilogue_fn,
        "backward": entry.backward_fn,
    }
    return {role: None if fn is None else program_of(fn, compiled) for role, fn in functions.items()}


def program_of(fn: Callable, compiled: object) -> Program:
    """``fn``, a function thunder built from a trace (or one ``rebuilt``), as a ``Program``, or ``NotStorable``."""
    return _program(inspect.unwrap(fn), compiled)


def guard_of(entry: CacheEntry, compiled: object) -> Program | None:
    """Where a transform pruned the prologue's checks (thunder's recipes' ``PrunePrologueChecks`` drops those of the
    module: its parameters, buffers and attributes), the prologue as traced, every check kept, as a ``Program``; else
    None. thunder prunes them on the promise that the module does not change after it is compiled; an entry loaded in
    another process runs this once, on its first call, to hold to the same promise."""
    traced, executed = entry.prologue_traces[0], entry.prologue_traces[-1]
    if _checks(executed) >= _checks(traced):
        return None
    full = transform_for_execution(traced, executors_list=(get_executor("python"),), use_del_last_used=False)[-1]
    return _program(full.python_callable(include_decorators=False), compiled)


def rebuilt_entry(programs: dict[str, Program | None], compiled: object, return_none_instead_of_grads: bool,
                  traces: dict[str, list], autocast: list[bool]) -> CacheEntry:  # fmt: skip
    """The ``CacheEntry`` of ``programs``, as thunder would build it for ``compiled`` where autocast was as
    ``autocast`` says (``autocast_now``); ``traces`` stand for its traces (what ``thunder.last_traces`` shows).
    Raises ``NotStorable`` where a name no longer imports."""
    fn = {role: None if p is None else rebuilt(p, compiled, autocast) for role, p in programs.items()}
    return CacheEntry(
        fn["prologue"], traces["prologue"], fn["computation"], traces["computation"], fn["epilogue"],
        traces["epilogue"], fn["backward"], traces["backward"], return_none_instead_of_grads,
    )  # fmt: skip


def interpreter_cache(jitted: object) -> list:
    """The list of cache entries thunder searches for ``jitted``."""
    return thunder.compile_stats(jitted).interpreter_cache


def on_each_new_entry(jitted: object, callback: Callable[[CacheEntry], None]) -> None:
    """Calls ``callback`` with each entry thunder adds to ``jitted``'s cache after a compilation, once added."""
    stats = thunder.compile_stats(jitted)
    stats.interpreter_cache = _Notifying(stats.interpreter_cache, callback)


def try_first(jitted: object, prologue: Callable) -> None:
    """Moves the entry whose prologue is ``prologue`` to where thunder tries it first (its list's end), so that the
    calls after the one it accepted find it at once. Called from that prologue, while thunder's search runs: once a
    prologue returns, thunder returns its entry without looking at the list again."""
    entries = interpreter_cache(jitted)
    at = next(i for i, entry in enumerate(entries) if entry.prologue_fn is prologue)
    entries.insert(len(entries), entries.pop(at))  # insert: thunder's list saves each entry appended to it


def compiled_afresh(jitted: object, args: tuple, kwargs: dict) -> CacheEntry:
    """The entry thunder compiles for the call ``jitted(*args, **kwargs)`` where its cache holds none, the call's
    computation not run (thunder's own step before it runs a call: tracing, passes, executors, then the prologue on
    the arguments, which reads and checks them). ``jitted``'s entries and statistics are left as they were."""
    stats = thunder.compile_stats(jitted)
    kept = dict(vars(stats))
    stats.interpreter_cache = []  # a list of thunder's own: nothing is saved or notified
    try:
        entry, _, _ = thunder.compile_data(jitted)._get_computation_and_inputs(*args, **kwargs)
    finally:
        vars(stats).clear()
        vars(stats).update(kept)
    return entry


class _Notifying(list):
    """thunder's list of entries, which it appends one to after each compilation."""

    def __init__(self, entries: list, callback: Callable[[CacheEntry], None]) -> None:
        super().__init__(entries)
        self.callback = callback

    def append(self, entry: CacheEntry) -> None:
        super().append(entry)
        self.callback(entry)


def _checks(prologue: object) -> int:
    return sum(bsym.sym.name.startswith("check_") for bsym in prologue.bound_symbols)


def _prologue_inside(timed: Callable) -> Callable:
    """The prologue thunder wraps in ``prologue_execution_timer`` (whose wrapper keeps it in its closure)."""
    inner = [c.cell_contents for c in timed.__closure__ or () if isinstance(c.cell_contents, types.FunctionType)]
    found = [f for f in inner if f.__code__.co_filename.startswith("thunder.")]
    if len(found) != 1:
        raise NotStorable("its prologue is not the one thunder 0.2.6 builds")
    return found[0]


def _program(fn: types.FunctionType, compiled: object) -> Program:
    code = fn.__code__
    lines = linecache.cache.get(code.co_filename)
    if not code.co_filename.startswith("thunder.") or lines is None:
        raise NotStorable(f"its function {code.co_name} is not a program thunder built from a trace")
    # the header comment says how long thunder's pass took: without it, one compilation is one text in any process
    text = _TOOK.sub("", "".join(lines[2]))
    names, blocks, regions = {}, {}, {}
    for name, value in fn.__globals__.items():
        if name in ("__builtins__", code.co_name) or name not in text:  # a global the program never names
            continue
        if isinstance(value, CalledProgram):  # a program thunder built too: stored whole, within this one
            blocks[name] = _program(inspect.unwrap(value.run), compiled)
        elif (region := _torch_compile_region(value)) is not None:  # torch.compile's text, thunder's too
            compiles, fullgraph = region
            regions[name] = replace(_program(compiles, compiled), fullgraph=fullgraph)
        else:
            names[name] = COMPILED if value is compiled and name == "__function_obj" else _reference(name, value)
    # the ad-hoc executor names a block's operator with its own id: named by order instead, one text in any process
    for k, name in enumerate(sorted(blocks, key=text.index)):
        stable = f"{name.rsplit('_', 2)[0]}_{k}"
        text, blocks[stable] = re.sub(rf"\b{re.escape(name)}\b", stable, text), blocks.pop(name)
    return Program(code.co_name, text, names, bytecode(text), blocks, regions)


def _torch_compile_region(value: object) -> tuple[types.FunctionType, bool] | None:
    """Where ``value`` is a region of thunder's torch.compile executor (``make_compiled``'s ``compiled_func_wrapper``,
    which calls ``torch.no_grad()(no_autocast(torch.compile(text's function, mode=..., fullgraph=...)))``): the
    function of the region's text, and ``fullgraph``; else None. ``NotStorable`` where a ``TorchCompileExecutor`` has
    a ``mode`` (the region does not keep which executor made it): a rebuild gives torch.compile no mode."""
    if getattr(value, "__qualname__", None) != "make_compiled.<locals>.compiled_func_wrapper":
        return None
    if getattr(value, "__module__", None) != "thunder.executors.torch_compile" or len(value.__closure__ or ()) != 1:
        return None
    if any(isinstance(e, TorchCompileExecutor) and e.mode is not None for e in get_all_executors()):
        raise NotStorable("a torch.compile executor has a mode, which a rebuilt region would not be given")
    at, fullgraph = value.__closure__[0].cell_contents, None
    while hasattr(at, "__wrapped__"):  # no_grad's, no_autocast's and torch.compile's wrappers, to the text's function
        for cell in at.__closure__ or ():
            if isinstance(cell.cell_contents, OptimizeContext):
                fullgraph = cell.cell_contents.fullgraph
        at = at.__wrapped__
    if not isinstance(at, types.FunctionType) or not isinstance(fullgraph, bool):
        raise NotStorable("a torch.compile region is not built as thunder 0.2.6 builds one")
    return at, fullgraph


def _torch_compiled(function: Callable, fullgraph: bool) -> Callable:
    """The region of ``function`` as ``make_compiled`` builds it (torch 2.3 on: its wrapper calls this alone)."""
    return torch.no_grad()(no_autocast(torch.compile(function, fullgraph=fullgraph)))


def bytecode(text: str) -> str:
    """``text`` compiled, as an entry stores it (base64 of zlib of ``marshal``): a later process executes it without
    compiling the text (the cache's key holds Python's version, which fixes the bytecode's format). A prologue's
    Python guards are a constant of a million characters for SmolLM2's 30 layers, whose compilation took 0.3-2.3 s
    of each load: the parser's memory, first touched, and the full collections its objects set off."""
    return base64.b64encode(zlib.compress(marshal.dumps(_compiled(text)))).decode()


def runs_its_text(program: Program) -> bool:
    """Whether ``program``'s bytecode is its text's compilation (code objects compare by what runs, not by file
    name): what the compile cache's ``verify`` compares is the text."""
    return _code(program) == _compiled(program.text)


def _compiled(text: str) -> types.CodeType:
    with gc_paused(collect=False):
        return compile(text, "thunder.program", "exec")


def _code(program: Program) -> types.CodeType:
    return marshal.loads(zlib.decompress(base64.b64decode(program.code)))


def _reference(name: str, value: object) -> str:
    """``value`` as a name a later process imports again, or ``NotStorable``."""
    if value is None:
        return NONE
    if isinstance(value, types.ModuleType):
        return value.__name__
    for executor in get_all_executors():
        if executor_name(executor) == executor.name and _implementation(executor, name) is value:
            return f"{_EXECUTOR}{executor.name}:{name}"
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):  # torch's constants: ``torch.strided``
        module, _, qualname = str(value).rpartition(".")
    if isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname:
        try:
            if imported(f"{module}:{qualname}") is value:
                return f"{module}:{qualname}"
        except (ImportError, AttributeError):
            pass
    raise NotStorable(f"its trace names {name} ({type(value).__name__}), which a later process cannot import")


def _implementation(executor: Executor, name: str) -> object:
    """What an operator executor runs for its operator ``name``: the ``fn`` given to ``register_operator``, which
    thunder keeps only in the closure that binds the operator's symbols (``call_ctx``)."""
    symbol = executor.opmap.get(name) if isinstance(executor, OperatorExecutor) else None
    bind = getattr(symbol, "_bind_postprocess", None)
    code = getattr(bind, "__code__", None)
    if code is None or "call_ctx" not in code.co_freevars:
        return None
    call_ctx = bind.__closure__[code.co_freevars.index("call_ctx")].cell_contents
    return None if call_ctx is None else call_ctx.get(name)


def executor_name(executor: Executor) -> str:
    """``executor``'s name as a later process knows it (thunder.jit's own executor is named anew for each function)."""
    return "__ad_hoc_executor" if _AD_HOC.match(str(executor.name)) else str(executor.name)


def imported(reference: str) -> object:
    """What a ``Program``'s reference stands for in this process."""
    if reference.startswith(_EXECUTOR):
        owner, _, name = reference.removeprefix(_EXECUTOR).rpartition(":")
        executor = get_executor(owner)
        found = None if executor is None else _implementation(executor, name)
        if found is None:
            raise ImportError(f"no executor {owner} registers an operator {name}")
        return found
    module, _, qualname = reference.partition(":")
    value = __import__(module, fromlist=["_"])
    for part in qualname.split(".") if qualname else ():
        value = getattr(value, part)
    return value


def trace_digest(trace: TraceCtx) -> str:
    """A digest of what ``trace`` computes, for a key: each bound symbol, subsymbols included, by its symbol's
    module, id and name, its executor and tags, each argument and output (a proxy by its name, kind, metadata and
    tags, a constant by its exact type and value) and its user's line. ``NotStorable`` where a bound symbol holds what
    the digest cannot name: a function or an object of its own (``_call_ctx``, ``_object_ctx``), or a constant of
    another type."""
    return hashlib.sha256(json.dumps([_bsym(b) for b in trace.bound_symbols]).encode()).hexdigest()


def _bsym(bsym: BoundSymbol) -> list:
    sym = bsym.sym
    if bsym._call_ctx or bsym._object_ctx:
        raise NotStorable(f"its op {sym.name} holds objects of its own")
    module = getattr(sym.module, "__name__", None)
    line = getattr(bsym.source_positions, "lineno", None)
    tags = sorted(str(t) for t in bsym.tags or ())
    executor = None if bsym._executor is None else executor_name(bsym._executor)
    return [module, _value(sym.id), sym.name, executor, _value(bsym.args), _value(bsym.kwargs), _value(bsym.output),
            tags, bsym.source_filename, line, [_bsym(s) for s in bsym.subsymbols]]  # fmt: skip


def _value(x: object) -> object:
    """``x`` as JSON that tells apart any two values a trace could take differently."""
    if isinstance(x, TensorProxy):
        meta = (x.device, x.dtype, x.shape, x.requires_grad, x.distparallel_type, x.thunder_fsdp_padding_size)
        return ["tensor", x.name, _value(meta), sorted(str(t) for t in x.tags)]
    if isinstance(x, NumberProxy):
        return [type(x).__name__, x.name, _value(x.python_type), _value(x.value)]
    if isinstance(x, Proxy):
        raise NotStorable(f"it holds a {type(x).__name__}, which the cache cannot name")
    if x is None or type(x) in (bool, int, float, complex, str):  # exactly: a subclass may print as another value
        return [type(x).__name__, repr(x)]  # repr: -0.0 and nan apart, and 1 from 1.0 and True
    if type(x) in (tuple, list):
        return [type(x).__name__, [_value(v) for v in x]]
    if type(x) is dict:
        return ["dict", [[_value(k), _value(v)] for k, v in x.items()]]
    if isinstance(x, slice):
        return ["slice", _value((x.start, x.stop, x.step))]
    if x is Ellipsis or isinstance(x, (type, enum.Enum, torch.dtype, dtypes.dtype, torch.device, Device,
                                       torch.memory_format, torch.layout)):  # fmt: skip
        return [type(x).__qualname__, f"{getattr(x, '__module__', '')}.{x!r}"]
    raise NotStorable(f"its trace holds a {type(x).__qualname__}, which the cache cannot name")


def autocast_now() -> list[bool]:
    """Whether autocast is on for the CPU and for CUDA: what thunder's ``no_autocast`` decorator (on every program
    of the torch executor) reads when a program is built, and sets again after each call of it. thunder builds a
    program within the call that compiles it, under the autocast its prologue then checks; a program rebuilt must
    be built under that same autocast, or each call would leave the caller's autocast switched."""
    return [torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda")]


def _executed(program: Program, ctx: dict) -> Callable:
    """The function ``program`` defines, its bytecode executed in ``ctx`` as ``build_callable`` executes a text: the
    text kept in ``linecache`` under a file name of its own, which its code objects name (tracebacks show its lines,
    and ``_program`` reads them to store an entry again)."""
    name = f"thunder.{program.function}_loaded_{next(_LOADED)}"
    linecache.cache[name] = len(program.text), None, program.text.splitlines(keepends=True), name
    exec(_named(_code(program), name), ctx)
    return ctx[program.function]


_LOADED = itertools.count()


def _named(code: types.CodeType, file_name: str) -> types.CodeType:
    """``code`` and the code objects it holds (the function's, its lambdas') with the file name ``file_name``."""
    consts = tuple(_named(c, file_name) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=file_name, co_consts=consts)


@contextlib.contextmanager
def _autocast_as(enabled: list[bool]) -> Iterator[None]:
    kept = autocast_now()
    for device, on in zip(("cpu", "cuda"), enabled):
        torch.set_autocast_enabled(device, on)
    try:
        yield
    finally:
        for device, on in zip(("cpu", "cuda"), kept):
            torch.set_autocast_enabled(device, on)


def rebuilt(program: Program, compiled: object, autocast: list[bool]) -> Callable:
    """The function of ``program``, as thunder would build it for ``compiled`` where autocast was as ``autocast``
    says (``autocast_now``); ``NotStorable`` where a name no longer imports."""
    ctx = {name: rebuilt(block, compiled, autocast) for name, block in program.blocks.items()}
    with _autocast_as(autocast):  # the state its ``no_autocast`` keeps, as for any program
        ctx.update((name, _torch_compiled(rebuilt(region, compiled, autocast), region.fullgraph))
                   for name, region in program.regions.items())  # fmt: skip
    for name, reference in program.names.items():
        if reference in (COMPILED, NONE):
            ctx[name] = compiled if reference == COMPILED else None
            continue
        try:
            ctx[name] = imported(reference)
        except (ImportError, AttributeError) as e:
            raise NotStorable(f"{reference} no longer imports ({e})") from e
    with _autocast_as(autocast):  # its decorators run as it is executed
        fn = _executed(program, ctx)
    if program.function == "prologue":  # as thunder does: the prologue holds the module, not itself
        del fn.__globals__["prologue"]
    return fn
