"""``thunder_ext.adapt_thunder``: importing the extension changes nothing in thunder; adapting changes what
stock thunder does only by adding what thunder lacks; the extension's compilations get the rest."""

import re
import subprocess
import sys
import textwrap

import pytest
import thunder
import torch

import thunder_ext
from thunder_ext.executors import checks
from thunder_ext.thunder026 import attribute_writes

# Runs in a fresh process: in this one, earlier tests have adapted thunder already.
SCRIPT = """
import thunder, torch

def write(k, i, v):
    return k.index_copy_(0, i, v)

def outcome(fn, *args):
    try:
        fn(*args)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "ran"

def stock():
    bad = (torch.zeros(4, 2), torch.tensor([1]), torch.zeros(1, 2, dtype=torch.float64))
    return {
        "dtype error": outcome(thunder.jit(write), *bad),
        "number as index": outcome(thunder.jit(write), torch.zeros(4, 2), 1, torch.zeros(1, 2)),
        "broadcasting copy_": outcome(thunder.jit(lambda a, b: a.copy_(b)), torch.zeros(2, 3), torch.ones(3)),
        "tensor % n": outcome(thunder.jit(lambda t: t % 3), torch.arange(4)),
        "fill_": outcome(thunder.jit(lambda t: t.fill_(2)), torch.zeros(2)),
    }

untouched = stock()
import thunder_ext
imported = stock()
extension = outcome(thunder_ext.jit(write), torch.zeros(4, 2), torch.tensor([1]), torch.zeros(1, 2, dtype=torch.float64))
adapted = stock()
print(repr((untouched, imported, extension, adapted)))
"""


@pytest.fixture(scope="module")  # one process for the tests below: they read stock thunder's defaults
def outcomes():
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return eval(run.stdout.strip().splitlines()[-1])  # the script's own repr of plain strings and dicts


@pytest.mark.executor_sets("defaults")
def test_importing_the_extension_changes_nothing_stock_thunder_does_or_says(outcomes):
    untouched, imported, _, _ = outcomes
    assert imported == untouched
    assert untouched["dtype error"] == "RuntimeError: Expected dtype thunder.dtypes.float32 but found thunder.dtypes.float64!"
    assert untouched["fill_"] != "ran" and untouched["tensor % n"] != "ran"


@pytest.mark.executor_sets("defaults")
def test_the_extensions_errors_name_the_op_and_stock_thunders_stay_thunders(outcomes):
    untouched, _, extension, adapted = outcomes
    assert extension.startswith("RuntimeError: index_copy_: cannot write into self (float32, shape (4, 2))")
    assert extension.endswith(untouched["dtype error"].removeprefix("RuntimeError: "))
    for what in ("dtype error", "number as index"):
        assert adapted[what] == untouched[what], what


@pytest.mark.executor_sets("defaults")
def test_adapting_adds_to_stock_thunder_only_what_it_lacks(outcomes):
    untouched, _, _, adapted = outcomes
    assert {what for what in untouched if adapted[what] != untouched[what]} == {"tensor % n", "fill_", "broadcasting copy_"}
    assert adapted["tensor % n"] == adapted["fill_"] == adapted["broadcasting copy_"] == "ran"


def test_the_extension_broadcasts_a_copy_and_takes_a_number_for_a_tensor_as_eager_does():
    a = torch.zeros(2, 3)
    thunder_ext.jit(lambda a, b: a.copy_(b))(a, torch.arange(3.0))
    torch.testing.assert_close(a, torch.arange(3.0).expand(2, 3))
    with pytest.raises(TypeError, match=r"^index_copy_: cannot write into self .*`index` must be a tensor, got int 1$"):
        thunder_ext.jit(lambda k, v: k.index_copy_(0, 1, v))(torch.zeros(4, 2), torch.zeros(1, 2))


def test_another_thunder_version_is_refused(monkeypatch):
    monkeypatch.setattr(thunder, "__version__", "0.3.0")
    with pytest.raises(RuntimeError, match=r"adapts lightning-thunder 0\.2\.6's tables .* this is lightning-thunder 0\.3\.0"):
        thunder_ext.adapt_thunder()
    with pytest.raises(RuntimeError, match=r"lightning-thunder 0\.3\.0"):
        thunder_ext.jit(lambda t: t.add_(1))


class _QuotedNames(torch.nn.Module):
    """A write on a line that holds a double quote (the prologue's refusal of arguments sharing written state names
    that line), and a string holding both quotes that the code reads (the Python guards compare it)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(4))
        self.mode = """say "hi", it's"""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        getattr(self, "seen").add_(x.sum(0))
        return x * 2 + self.seen if self.mode.startswith("say") else x


@pytest.mark.executor_sets("defaults")  # printing a program text: no executor runs it differently
def test_a_string_with_quotes_in_a_prologue_check_compiles_as_written(monkeypatch):
    from thunder.core import codeutils

    eager, x = _QuotedNames(), torch.ones(2, 4)
    jitted = thunder_ext.jit(_QuotedNames(), compile_cache=False)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x), eager(x))
    assert 'getattr(self, "seen").add_(x.sum(0))' in str(thunder.last_prologue_traces(jitted)[-1])
    # broken on purpose: thunder's own printer of collections in the extension's compilations
    (thunders,) = [cell.cell_contents for cell in codeutils.prettyprint.__closure__]
    monkeypatch.setattr(codeutils, "prettyprint", thunders)
    with pytest.raises(SyntaxError), torch.no_grad():
        thunder_ext.jit(_QuotedNames(), compile_cache=False)(x)


class _Counting(torch.nn.Module):
    """Three attributes assigned in one call, the third from the first two."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = 0, 0, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.a = self.a + 1
        self.b = self.b + 2
        self.c = self.a + self.b
        return x * self.c


class _Holding(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Counting()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def _attributes(module: _Holding) -> tuple[int, int, int]:
    return module.inner.a, module.inner.b, module.inner.c


@pytest.mark.executor_sets("defaults")  # the interpreter's write-back of attributes: no executor runs it
def test_every_attribute_a_call_assigns_on_a_submodule_is_written_back(monkeypatch):
    def run(jitted, eager):
        for _ in range(3):
            torch.testing.assert_close(jitted(torch.ones(2)), eager(torch.ones(2)))
            assert _attributes(jitted._model) == _attributes(eager)

    run(thunder_ext.jit(_Holding(), compile_cache=False), _Holding())
    # broken on purpose: thunder's own lookaside of object.__setattr__, which writes back only the first
    monkeypatch.setattr(attribute_writes, "compiling_with_extension", lambda: False)
    with pytest.raises(AssertionError):
        run(thunder_ext.jit(_Holding(), compile_cache=False), _Holding())


@pytest.mark.executor_sets("defaults")  # refused while tracing, before any executor runs
def test_an_attribute_assigned_on_the_compiled_module_itself_is_refused_before_anything_runs(monkeypatch):
    module, x = _Counting(), torch.ones(2)
    refused = r"assigns 'a', 'b', 'c' on the compiled _Counting itself"
    with pytest.raises(attribute_writes.DroppedAttributeWriteError, match=refused):
        thunder_ext.jit(module, compile_cache=False)(x)
    assert (module.a, module.b, module.c) == (0, 0, 0)
    # broken on purpose: thunder's own write-back, which drops them silently
    monkeypatch.setattr(attribute_writes, "compiling_with_extension", lambda: False)
    thunder_ext.jit(module, compile_cache=False)(x)
    assert (module.a, module.b, module.c) == (0, 0, 0)


class _Difference(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x - 0.5 * y


class _Unpacking(torch.nn.Module):
    """Unpacks each kind of sequence a traced call meets: a module's tuple of numbers (guarded), ``enumerate``'s
    pairs over a ``ModuleList``, a list argument of tensors, an op's tuple of proxies, a shape, a list the call
    built and changed, and a nested tuple; and a call's ``*args`` (``nn.Module.__call__``'s, of two tensors)."""

    def __init__(self) -> None:
        super().__init__()
        self.pair = (2.0, 3.0)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
        self.difference = _Difference()

    def forward(self, x: torch.Tensor, xs: list) -> torch.Tensor:
        x = self.difference(x, x * 3.0)
        a, b = self.pair
        for i, block in enumerate(self.blocks):
            x = block(x) * (i + 1)
        p, q = xs
        u, v = x.split(2, dim=-1)
        rows, _ = x.shape
        built = [p]
        built.append(q * rows)
        c, (d, e) = built[0], (built[1], u)
        return (x * a + b + c + d).sum(-1, keepdim=True) + e.sum() - v


def _unpacked(model: torch.nn.Module) -> tuple[torch.Tensor, str, str]:
    x, xs = torch.ones(2, 4), [torch.full((2, 4), 0.5), torch.full((2, 4), 0.25)]
    jitted = thunder_ext.jit(model, compile_cache=False, block_programs=False)  # the blocks' ops, not programs
    with torch.no_grad():
        out = jitted(x, xs)
    return out, str(thunder.last_traces(jitted)[0]), str(thunder.last_prologue_traces(jitted)[0])


@pytest.mark.executor_sets("defaults")  # the interpreter's handler: what it traces, before any executor runs
def test_a_tuple_or_list_unpacked_from_its_items_traces_what_thunders_handler_traces(monkeypatch):
    from thunder.core.interpreter import InterpreterError

    from thunder_ext.thunder026 import sequence_unpacking

    torch.manual_seed(0)
    model = _Unpacking()
    with torch.no_grad():
        eager = model(torch.ones(2, 4), [torch.full((2, 4), 0.5), torch.full((2, 4), 0.25)])
    with monkeypatch.context() as thunders:  # thunder's handler: an iterator interpreted
        thunders.setattr(sequence_unpacking, "compiling_with_extension", lambda: False)
        theirs = _unpacked(model)
    torch.testing.assert_close(theirs[0], eager)
    assert "= module.pair" in theirs[2] and re.search(r"check_number_type_and_value\(\w+, 3\.0\)", theirs[2])

    def as_thunders() -> bool:  # eager's output, and the same computation and prologue (the pair's checks in it)
        try:
            ours = _unpacked(model)
        except InterpreterError:
            return False
        return torch.allclose(ours[0], eager) and ours[1:] == theirs[1:]

    assert as_thunders()
    # broken on purpose: the items pushed first first, so ``a, b = (2.0, 3.0)`` binds a = 3.0
    with monkeypatch.context() as broken:
        broken.setattr(sequence_unpacking, "reversed", lambda items: items, raising=False)
        assert not as_thunders()
    # and the first call's two tensors of ``*args`` (``nn.Module.__call__``'s, which passes them on to ``forward`` by
    # another ``*args``) passed last first, so ``difference(x, 3x)`` computes 3x - x / 2
    from thunder.core.proxies import TensorProxy

    seen = []

    def swapped(items: list) -> list:
        if len(items) == 2 and all(isinstance(w.value, TensorProxy) for w in items) and not seen:
            seen.append(items)
            return [*items][::-1]
        return [*items]

    monkeypatch.setattr(sequence_unpacking, "list", swapped, raising=False)
    assert not as_thunders()


def _arithmetic(x: torch.Tensor) -> torch.Tensor:
    """Each operator on two plain ints (a shape's), in-place forms too, and on two floats; then a mix of the two
    types, and a bool, which go to thunder's handler."""
    rows, cols = x.shape
    ints = [rows + cols, rows & cols, cols // rows, rows << 1, rows * cols, cols % 3, rows | cols, rows**3, cols >> 1,
            rows - cols, cols / rows, rows ^ cols]  # fmt: skip
    n = 0
    for _ in range(3):
        n += rows
    n -= cols
    f = 1.5
    f *= 2.0
    floats = [f + 0.25, f - 0.75, f * 3.0, f / 4.0, f // 0.7, f % 0.7, f**2.0]
    mixed = [rows * 0.5, 2.0 + cols, True + rows]
    return x * sum(ints) + n + sum(floats) * x.sum() + sum(mixed)


def _as_thunder_traces(monkeypatch, change, traced):
    """``traced()`` with the interpreter change of the module ``change`` left out, as in stock thunder."""
    with monkeypatch.context() as thunders:
        thunders.setattr(change, "compiling_with_extension", lambda: False)
        return traced()


@pytest.mark.executor_sets("defaults")  # the interpreter's handler: what it traces, before any executor runs
def test_plain_numbers_operators_trace_what_thunders_handler_traces(monkeypatch):
    from thunder_ext.thunder026 import plain_arithmetic

    x = torch.arange(8.0).reshape(2, 4)

    def traced() -> tuple[torch.Tensor, str, list[str], set]:
        """The output, the computation, the prologue but for its Python guards, and their checks."""
        jitted = thunder_ext.jit(_arithmetic, compile_cache=False)
        out = jitted(x)
        prologue = thunder.last_prologue_traces(jitted)[0]
        (guard,) = [b for b in prologue.bound_symbols if b.sym.name == "check_python_values"]
        rest = [line for line in str(prologue).splitlines() if "check_python_values" not in line]
        return out, str(thunder.last_traces(jitted)[0]), rest, set(checks.decoded(guard.args[0]))

    theirs = _as_thunder_traces(monkeypatch, plain_arithmetic, traced)
    torch.testing.assert_close(theirs[0], _arithmetic(x))

    def as_thunders() -> bool:
        # the guards may check more: thunder's emulation reads builtins (``hasattr``, ``type``) through its own
        # module's globals first, and the code's reads of ``range`` and ``sum`` from the same dict then have no path
        ours = traced()
        return torch.allclose(ours[0], _arithmetic(x)) and ours[1:3] == theirs[1:3] and ours[3] >= theirs[3]

    assert as_thunders()
    # broken on purpose: ``+`` called as ``-``
    monkeypatch.setattr(plain_arithmetic, "_METHODS", ("__sub__", *plain_arithmetic._METHODS[1:]))
    assert not as_thunders()


@pytest.mark.executor_sets("defaults")
def test_a_plain_numbers_operator_that_raises_raises_as_python_says():
    def divide(x):
        rows, cols = x.shape
        return x * (cols // (rows - 2))

    with pytest.raises(ZeroDivisionError, match="integer division or modulo by zero"):
        divide(torch.ones(2, 4))
    with pytest.raises(ZeroDivisionError, match="integer division or modulo by zero"):
        thunder_ext.jit(divide, compile_cache=False)(torch.ones(2, 4))


@pytest.mark.executor_sets("defaults")
def test_a_sequence_of_another_length_fails_to_unpack_as_python_says():
    def unpack(x, items):
        a, b = items
        return x * a * b

    for items, message in [((1, 2, 3), "too many values to unpack (expected 2)"),
                           ([1], "not enough values to unpack (expected 2, got 1)")]:  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)):
            unpack(torch.ones(1), items)
        with pytest.raises(ValueError, match=re.escape(message)):
            thunder_ext.jit(unpack, compile_cache=False)(torch.ones(1), items)


@pytest.mark.executor_sets("defaults")  # printing a trace: no executor runs
def test_a_bound_symbols_contexts_gathered_in_one_pass_are_thunders_two(monkeypatch):
    from thunder.core import devices, dtypes, prims
    from thunder.core.codeutils import SigInfo
    from thunder.core.proxies import TensorProxy
    from thunder.core.symbol import BoundSymbol
    from thunder.core.trace import TraceCtx, tracectx

    from thunder_ext.thunder026 import gathered_contexts

    class Held:  # no literal: the program names it in its context
        pass

    def printed(gather) -> tuple[str, dict]:
        """A program returning an argument, an object and a dtype (a module to import), printed and gathered by
        ``gather``, its bound symbols' dicts empty at first."""
        trace, held = TraceCtx(), Held()
        with tracectx(trace):
            a = TensorProxy(shape=(2,), device=devices.cpu, dtype=dtypes.float32)
            trace.args, trace.kwargs, trace._siginfo = (a,), {}, SigInfo.from_name_and_args("f", [a])
            trace.bound_symbols.append(prims.unpack_trivial.bind(a, name=a.name, output=a))
            prims.python_return((a, held, dtypes.float64))
        with monkeypatch.context() as m:
            m.setattr(BoundSymbol, "gather_ctxs", gather)
            text, ctx = trace.python(), trace.python_ctx()
        return text, {name: "held" if value is held else value for name, value in ctx.items()}

    theirs = printed(gathered_contexts._thunders)
    assert "held" in theirs[1].values() and theirs[1]["dtypes"] is dtypes
    assert printed(gathered_contexts.gather_ctxs) == theirs
    # broken on purpose: no objects gathered
    assert printed(lambda self: (self.import_ctx(), self._get_call_ctx(), {})) != theirs


# Each reads a global of its namespace, a builtin, and a global that shadows a builtin (``pow``); built in a namespace
# of each kind of ``__builtins__``: a dict (any imported module's) and the ``builtins`` module (``__main__``'s).
_GLOBALS_READ = """
def read_globals(x):
    return x * SCALE + len(x.shape) + pow(2, 3) + sum(range(3))
"""


def _reading_globals(builtins_as_module: bool):
    import builtins

    namespace = {"__builtins__": builtins if builtins_as_module else vars(builtins), "SCALE": 2.5,
                 "pow": lambda a, b: a * b}  # fmt: skip
    exec(_GLOBALS_READ, namespace)
    return namespace["read_globals"]


@pytest.mark.executor_sets("defaults")  # the interpreter's reading: what it traces, before any executor runs
@pytest.mark.parametrize("builtins_as_module", [False, True], ids=["builtins dict", "builtins module"])
def test_globals_read_trace_what_thunders_reading_traces(monkeypatch, builtins_as_module):
    from thunder.core.interpreter import _interpret_call

    from thunder_ext.thunder026 import global_loads

    fn, x = _reading_globals(builtins_as_module), torch.arange(6.0).reshape(2, 3)

    def traced() -> tuple[torch.Tensor, str, str]:
        jitted = thunder_ext.jit(fn, compile_cache=False)
        out = jitted(x)
        return out, str(thunder.last_traces(jitted)[0]), str(thunder.last_prologue_traces(jitted)[0])

    theirs = _as_thunder_traces(monkeypatch, global_loads, traced)
    torch.testing.assert_close(theirs[0], fn(x))

    def as_thunders() -> bool:
        ours = traced()
        return torch.equal(ours[0], theirs[0]) and ours[1:] == theirs[1:]

    assert as_thunders()

    # broken on purpose: a builtin read before the namespace's own global of that name
    def builtins_first(mapping, key):
        held = mapping.value
        if "__builtins__" in held and key.value in vars(__import__("builtins")):
            mapping = _interpret_call(dict.__getitem__, mapping, thunder.core.interpreter.wrap_const("__builtins__"))
            if not isinstance(mapping.value, dict):
                return _interpret_call(getattr, mapping, key)
        return _interpret_call(dict.__getitem__, mapping, key)

    monkeypatch.setattr(global_loads, "_read", builtins_first)
    assert not as_thunders()


@pytest.mark.executor_sets("defaults")
def test_a_global_read_from_nowhere_raises_as_python_says():
    namespace = {"__builtins__": vars(__import__("builtins"))}
    exec("def read_nowhere(x):\n    return x * nowhere\n", namespace)
    with pytest.raises(NameError, match="name 'nowhere' is not defined"):
        namespace["read_nowhere"](torch.ones(2))
    with pytest.raises(NameError, match="name 'nowhere' is not defined"):
        thunder_ext.jit(namespace["read_nowhere"], compile_cache=False)(torch.ones(2))
