"""Random in-place programs, written out as readable Python, and their differential run against eager.

A program is Python source with two functions: ``program(a0, a1, ...)``, a few statements that mix
views, reads and in-place writes of its arguments and of its own temporaries, and ``make_args()``,
which builds the arguments (some of them views of others, so arguments alias). The generator
(``programs()``, a hypothesis strategy) tracks shapes so that every program is well formed; the
rare one that eager PyTorch itself refuses (say a source that partially overlaps its target), or computes
in an order-dependent way where its overlap check cannot tell (``_RefusingPartialOverlap``), is discarded,
since there is nothing to compare with.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import textwrap
from dataclasses import dataclass, field

import thunder
import torch
from hypothesis import assume
from hypothesis import strategies as st
from thunder.core.transforms import Transform
from torch.testing import assert_close

import thunder_ext
from helpers import clone_args
from helpers import HoistReads, HoistWrites, SinkReads

# thunder's own order (``Transform`` changes nothing), and the adversarial schedulers of test_guarantees.py:
# each a legal reordering of the final trace before the checker sees it, so that only the ordering edges
# keep each write between the readers of the old value and the readers of the new one.
SCHEDULERS: list[type[Transform]] = [Transform, HoistWrites, HoistReads, SinkReads]

# where every program's arguments are made: THUNDER_EXT_FUZZ_DEVICE=cuda on a GPU (scripts/gpu_check.sh), so that
# thunder's default executors put nvFuser's regions around the writes
DEVICE = torch.device(os.environ.get("THUNDER_EXT_FUZZ_DEVICE", "cpu"))
SCALARS = [-2.0, -0.5, 0.5, 1.5, 3.0]
# in-place ops whose new value depends on the old one otherwise than by adding to it
NON_ADDITIVE_WRITES = ["mul_", "relu_", "clamp_", "masked_fill_", "fill_", "copy_of_itself"]
WRITES = ["add_", "copy_", "index_copy_", "index_add_", "scatter_", "zero_", "setitem_int", "setitem_slice",
          "setitem_index", *NON_ADDITIVE_WRITES]  # fmt: skip


@dataclass(frozen=True)
class Refusal:
    """A refusal of aliased arguments that docs/bad_input.md lists, under its case id there."""

    case: str
    error: type[BaseException]
    message: str  # a regular expression the error's text must match
    thunders_own: bool  # raised by thunder while tracing: stock thunder.jit must raise it too


REFUSALS = [
    Refusal("aliased-transposed-view", thunder_ext.AliasedArgumentsError, r"share storage as different views", False),
    Refusal("aliased-unused-duplicate", thunder_ext.AliasedArgumentsError, r"share storage, .*does not use every", False),
    Refusal("aliased-position-on-another-argument", RuntimeError,
            r"^(index dtype=.* was not an integer dtype|Expected pred to be a tensor with dtype bool|Expected dtype )", True),
    Refusal("aliased-position-past-the-arguments", IndexError, r"^list index out of range$", True),
    Refusal("aliased-with-a-global", thunder_ext.AliasedArgumentsError,
            r"shares storage with a tensor the function takes from elsewhere", False),
]  # fmt: skip


class Program:
    def __init__(self, source: str) -> None:
        self.source = source

    def __repr__(self) -> str:  # how hypothesis prints a failing example: as the program itself
        return "\n" + self.source

    @property
    def name(self) -> str:
        return hashlib.sha1(self.source.encode()).hexdigest()[:12]

    @property
    def scheduler(self) -> type[Transform]:
        """The scheduler this program runs under, chosen by its text: reproducible, and spread evenly."""
        return SCHEDULERS[int(self.name, 16) % len(SCHEDULERS)]

    def load(self):
        namespace: dict = {}
        exec(compile(self.source, f"<fuzzed program {self.name}>", "exec"), namespace)
        return namespace["program"], namespace["make_args"]


@dataclass
class Var:
    name: str
    shape: tuple[int, ...]
    contiguous: bool


@dataclass
class Builder:
    draw: st.DrawFn
    args: list[tuple[str, str]] = field(default_factory=list)  # (name, expression in make_args)
    arg_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    body: list[str] = field(default_factory=list)
    tensors: list[Var] = field(default_factory=list)  # float32 tensors the body may view, read or write
    reads: list[str] = field(default_factory=list)
    indices: dict[tuple[int, bool], tuple[str, int]] = field(default_factory=dict)  # (size, distinct): the last index
    counter: int = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def new_arg(self, expression: str, shape: tuple[int, ...], *, usable: bool = True) -> str:
        name = f"a{len(self.args)}"
        self.args.append((name, expression))
        self.arg_shapes[name] = shape
        if usable and shape:  # 0-d tensors serve as sources only
            self.tensors.append(Var(name, shape, contiguous=True))
        return name

    def pick(self, vars_: list[Var]) -> Var:
        return self.draw(st.sampled_from(vars_))

    def shape(self, min_dims: int = 1) -> tuple[int, ...]:
        return tuple(self.draw(st.lists(st.integers(1, 4), min_size=min_dims, max_size=3)))

    # -- arguments --------------------------------------------------------------------------------

    def float_arg(self, shape: tuple[int, ...]) -> str:
        return self.new_arg(f"torch.randn({shape})", shape)

    def aliasing_arg(self) -> None:
        """An argument that is a view of an earlier one: the same tensor, a reshape, or another view."""
        base = self.pick([v for v in self.tensors if v.name in self.arg_shapes])
        options = [(base.name, base.shape, True), (f"{base.name}.view(-1)", (prod(base.shape),), True)]
        if base.shape[0] > 1:
            options.append((f"{base.name}[1:]", (base.shape[0] - 1, *base.shape[1:]), True))
        if len(base.shape) > 1:
            options.append((f"{base.name}[0]", base.shape[1:], True))
            options.append((f"{base.name}.t()" if len(base.shape) == 2 else f"{base.name}.transpose(0, 1)",
                            (base.shape[1], base.shape[0], *base.shape[2:]), False))  # fmt: skip
        expression, shape, contiguous = self.draw(st.sampled_from(options))
        name = self.new_arg(expression, shape)
        self.tensors[-1].contiguous = contiguous

    def tensor_of_shape(self, shape: tuple[int, ...]) -> str:
        """An existing tensor of exactly ``shape`` (it may overlap the target) or a new argument."""
        existing = [v.name for v in self.tensors if v.shape == shape]
        if existing and self.draw(st.booleans()):
            return self.draw(st.sampled_from(existing))
        return self.float_arg(shape)

    def source_for(self, shape: tuple[int, ...], *, dtypes: bool = False) -> str:
        """A tensor that broadcasts to ``shape``: an existing one or a new argument, of another dtype if asked."""
        if self.draw(st.booleans()):
            return self.tensor_of_shape(shape)
        keep = self.draw(st.integers(0, len(shape)))  # the leading dims that are dropped are broadcast
        src_shape = tuple(d if self.draw(st.booleans()) else 1 for d in shape[len(shape) - keep :])
        dtype = self.draw(st.sampled_from(["float32", "float64", "int64"])) if dtypes else "float32"
        if not src_shape and dtype == "float32" and self.draw(st.booleans()):
            # a 0-d value the program computes, which thunder's prims take unbroadcast (a gradient to sum back)
            reduced = self.draw(st.sampled_from([".sum()", ".flatten()[0]", ".abs().mean()"]))
            return f"{self.pick(self.tensors).name}{reduced}"
        if dtype == "float32":
            return self.float_arg(src_shape)
        if dtype == "float64":
            return self.new_arg(f"torch.randn({src_shape}, dtype=torch.float64)", src_shape, usable=False)
        return self.new_arg(f"torch.randint(-3, 4, {src_shape})", src_shape, usable=False)

    def index_arg(self, size: int, *, distinct: bool) -> tuple[str, int]:
        """An index tensor into a dimension of ``size``; sometimes the one an earlier op took, as a layer's K and V
        writes take one position (an op at an index an earlier op took waits for no write: functionalize rule 3)."""
        if (size, distinct) in self.indices and self.draw(st.booleans()):
            return self.indices[size, distinct]
        if distinct:
            positions = self.draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=size, unique=True))
        else:
            positions = self.draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=size + 1))
        index = self.new_arg(f"torch.tensor({positions})", (len(positions),), usable=False), len(positions)
        self.indices[size, distinct] = index
        return index

    def operand(self, shape: tuple[int, ...]) -> str:
        return str(self.draw(st.sampled_from(SCALARS))) if self.draw(st.booleans()) else self.source_for(shape)

    # -- statements -------------------------------------------------------------------------------

    def view(self, t: Var | None = None) -> Var:
        t = t or self.pick(self.tensors)
        n = len(t.shape)
        options = ["unsqueeze"]
        if t.shape[0] > 1:
            options += ["slice0", "narrow"]
        if n > 1:
            options += ["select", "transpose", "slice1", "permute", "diagonal"]
        if 1 in t.shape:
            options.append("squeeze")
        if t.contiguous:
            options.append("view")
        kind = self.draw(st.sampled_from(options))
        d0 = t.shape[0]
        if kind == "unsqueeze":
            dim = self.draw(st.integers(0, n))
            expr, shape, contiguous = f"{t.name}.unsqueeze({dim})", t.shape[:dim] + (1,) + t.shape[dim:], t.contiguous
        elif kind in ("slice0", "narrow"):
            start = self.draw(st.integers(0, d0 - 1))
            stop = self.draw(st.integers(start + 1, d0))
            expr = f"{t.name}[{start}:{stop}]" if kind == "slice0" else f"{t.name}.narrow(0, {start}, {stop - start})"
            shape, contiguous = (stop - start, *t.shape[1:]), t.contiguous
        elif kind == "select":
            dim = self.draw(st.integers(0, n - 1))
            index = self.draw(st.integers(0, t.shape[dim] - 1))
            expr = f"{t.name}[{index}]" if dim == 0 else f"{t.name}.select({dim}, {index})"
            shape, contiguous = t.shape[:dim] + t.shape[dim + 1 :], t.contiguous and dim == 0
        elif kind == "transpose":
            expr, shape, contiguous = f"{t.name}.transpose(0, 1)", (t.shape[1], t.shape[0], *t.shape[2:]), False
        elif kind == "slice1":
            start = self.draw(st.integers(0, t.shape[1] - 1))
            expr, shape, contiguous = f"{t.name}[:, {start}:]", (d0, t.shape[1] - start, *t.shape[2:]), False
        elif kind == "diagonal":
            expr, shape, contiguous = f"{t.name}.diagonal()", (*t.shape[2:], min(t.shape[:2])), False
        elif kind == "permute":
            expr, shape, contiguous = f"{t.name}.permute({tuple(reversed(range(n)))})", t.shape[::-1], False
        elif kind == "squeeze":
            dim = t.shape.index(1)
            expr, shape, contiguous = f"{t.name}.squeeze({dim})", t.shape[:dim] + t.shape[dim + 1 :], t.contiguous
        else:
            expr, shape, contiguous = f"{t.name}.view(-1)", (prod(t.shape),), True
        if not shape:
            return self.view(t)  # a 0-d view serves no write and no later view
        name = self.fresh("v")
        self.body.append(f"{name} = {expr}")
        self.tensors.append(Var(name, shape, contiguous))
        return self.tensors[-1]

    def read(self) -> None:
        t = self.pick(self.tensors)
        kind = self.draw(st.sampled_from(["sum", "scale", "clone", "sum0"]))
        name = self.fresh("r")
        if kind == "sum":
            self.body.append(f"{name} = {t.name}.sum()")
        elif kind == "sum0":
            self.body.append(f"{name} = {t.name}.sum(0)")
            if len(t.shape) > 1:
                self.tensors.append(Var(name, t.shape[1:], contiguous=True))
        else:
            expr = f"{t.name} * {self.draw(st.sampled_from(SCALARS))}" if kind == "scale" else f"{t.name}.clone()"
            self.body.append(f"{name} = {expr}")
            self.tensors.append(Var(name, t.shape, t.contiguous))
        self.reads.append(name)

    def write(self, t: Var | None = None, kinds: list[str] = WRITES) -> None:
        t = t or self.pick(self.tensors)
        s, n = t.shape, len(t.shape)
        kind = self.draw(st.sampled_from(kinds))
        if kind in ("add_", "mul_"):
            self.body.append(f"{t.name}.{kind}({self.operand(s)})")
        elif kind == "relu_":
            self.body.append(f"{t.name}.relu_()")
        elif kind == "clamp_":
            self.body.append(f"{t.name}.clamp_({self.draw(st.sampled_from(SCALARS[:2]))}, {SCALARS[-1]})")
        elif kind == "copy_of_itself":
            self.body.append(f"{t.name}.copy_({t.name} * {self.draw(st.sampled_from(SCALARS))})")
        elif kind == "copy_":
            self.body.append(f"{t.name}.copy_({self.source_for(s, dtypes=True)})")
        elif kind in ("index_copy_", "index_add_"):
            dim = self.draw(st.integers(0, n - 1))
            index, k = self.index_arg(s[dim], distinct=kind == "index_copy_")
            src = self.tensor_of_shape(s[:dim] + (k,) + s[dim + 1 :])
            self.body.append(f"{t.name}.{kind}({dim}, {index}, {src})")
        elif kind == "scatter_":
            dim = self.draw(st.integers(0, n - 1))
            k = self.draw(st.integers(1, s[dim]))
            index_shape = s[:dim] + (k,) + s[dim + 1 :]
            # a permutation per column, cut to k: no position written twice, so eager is deterministic
            index = self.new_arg(f"torch.rand({s}).argsort(dim={dim}).narrow({dim}, 0, {k})", index_shape, usable=False)
            self.body.append(f"{t.name}.scatter_({dim}, {index}, {self.float_arg(index_shape)})")
        elif kind == "masked_fill_":
            mask_shape = s[self.draw(st.integers(0, n - 1)) :]
            mask = self.new_arg(f"torch.rand({mask_shape}) < 0.5", mask_shape, usable=False)
            self.body.append(f"{t.name}.masked_fill_({mask}, {self.draw(st.sampled_from(SCALARS))})")
        elif kind == "fill_":
            self.body.append(f"{t.name}.fill_({self.draw(st.sampled_from(SCALARS))})")
        elif kind == "zero_":
            self.body.append(f"{t.name}.zero_()")
        elif kind == "setitem_int":
            index = self.draw(st.integers(-s[0], s[0] - 1))
            value = self.operand(s[1:]) if n > 1 else str(self.draw(st.sampled_from(SCALARS)))
            self.body.append(f"{t.name}[{index}] = {value}")
        elif kind == "setitem_slice":
            start = self.draw(st.integers(0, s[0] - 1))
            stop = self.draw(st.integers(start + 1, s[0]))
            self.body.append(f"{t.name}[{start}:{stop}] = {self.operand((stop - start, *s[1:]))}")
        else:
            index, k = self.index_arg(s[0], distinct=True)
            self.body.append(f"{t.name}[{index}] = {self.operand((k, *s[1:]))}")

    def write_through_views(self) -> None:
        """A write through a chain of views of a temporary, by an op whose new value depends on the old one, and
        the temporary returned: the class whose gradient thunder's renames get wrong (docs/design.md)."""
        t = self.pick(self.tensors)
        name = self.fresh("r")
        self.body.append(f"{name} = {t.name} * {self.draw(st.sampled_from(SCALARS))}")
        self.tensors.append(Var(name, t.shape, t.contiguous))
        self.reads.append(name)
        view = self.tensors[-1]
        for _ in range(self.draw(st.integers(1, 3))):
            view = self.view(view)
        self.write(view, NON_ADDITIVE_WRITES)

    def source(self) -> str:
        params = ", ".join(name for name, _ in self.args)
        body = "\n".join(self.body)
        returns = ", ".join(self.reads) + ("," if len(self.reads) == 1 else "")
        arg_lines = "\n".join(f"{name} = {expression}" for name, expression in self.args)
        return (
            "import torch\n\n\n"
            f"def program({params}):\n{textwrap.indent(body, '    ')}\n    return ({returns})\n\n\n"
            f"def make_args():\n    torch.manual_seed({self.draw(st.integers(0, 2**16))})\n"
            f"{textwrap.indent(arg_lines, '    ')}\n    return [{params}]\n"
        )


def prod(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


@st.composite
def programs(draw: st.DrawFn, max_statements: int = 8) -> Program:
    builder = Builder(draw)
    for _ in range(draw(st.integers(1, 2))):
        builder.float_arg(builder.shape())
    if draw(st.integers(0, 2)) == 0:
        builder.aliasing_arg()
    for _ in range(draw(st.integers(1, max_statements))):
        draw(st.sampled_from([builder.view, builder.read, builder.write, builder.write, builder.write_through_views]))()
    return Program(builder.source())


def aliased(args: list) -> bool:
    return len({a.untyped_storage().data_ptr() for a in args}) < len(args)


def refusal(error: BaseException) -> Refusal | None:
    return next((r for r in REFUSALS if type(error) is r.error and re.search(r.message, str(error))), None)


def check_documented_refusal(error: Exception, fn, args: list, jit_args: list) -> None:
    """``error`` is a refusal docs/bad_input.md lists (thunder's own ones raised by stock thunder.jit
    too, with the same text), and the failed call left every input untouched; else ``error`` is raised."""
    documented = refusal(error)
    if documented is None:
        raise error
    if documented.thunders_own:
        try:
            thunder.jit(fn)(*clone_args(args))
        except documented.error as stock:
            assert str(stock) == str(error), f"stock thunder.jit fails otherwise: {stock}"
        else:
            raise AssertionError(f"stock thunder.jit runs this call; thunder_ext.jit raised {error!r}") from error
    for i, (a, before) in enumerate(zip(jit_args, args)):
        assert_close(a, before, msg=lambda m: f"argument {i} was written by a failed call: {m}")


class ReadingState(torch.nn.Module):
    """A program as a module's forward, one of whose arguments is the module's own buffer ``s`` (``m(m.s)``, and
    the other arguments made as views of it view it): the class of issue 60's item 5. The forward reads ``s``
    before the program and after it, so that each read must order against the program's writes into the argument
    as a read of the argument would."""

    def __init__(self, program, state: torch.Tensor) -> None:
        super().__init__()
        self.program = program
        self.register_buffer("s", state)  # the tensor itself, not a copy

    def forward(self, *args):
        before = self.s.sum(0)
        return (before, *self.program(*args), self.s * 1)


GRAD_MODES = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


@dataclass(frozen=True)
class GradSetting:
    """The grad mode a program runs under, and which of its arguments require grad (by position; only
    floating-point ones, and none where arguments alias: ``_with_grad``)."""

    mode: str
    requires_grad: tuple[int, ...]

    HEADER = "# grad setting: "

    def header(self) -> str:
        return f"{self.HEADER}{self.mode} {list(self.requires_grad)}\n"

    @classmethod
    def of(cls, source: str) -> GradSetting:
        """The setting a saved program's header names."""
        line = next(line for line in source.splitlines() if line.startswith(cls.HEADER))
        mode, positions = line[len(cls.HEADER) :].split(" ", 1)
        return cls(mode, tuple(int(p) for p in positions.strip("[]").split(",") if p.strip()))


@st.composite
def grad_settings(draw: st.DrawFn, n_args: int) -> GradSetting:
    flags = draw(st.lists(st.booleans(), min_size=n_args, max_size=n_args))  # each argument on its own, evenly
    return GradSetting(draw(st.sampled_from(list(GRAD_MODES))), tuple(i for i, flag in enumerate(flags) if flag))


def _with_grad(args: list, setting: GradSetting) -> list:
    """``args`` with those ``setting`` names requiring grad (floating-point ones). Where arguments alias, none
    does: the arguments are separate tensors over one storage (``clone_args``), which eager's autograd does
    not know to share, so eager is no reference for their gradients; and thunder 0.2.6 fails to compile
    some of them (``tests/fuzz_regressions/requires_grad/found_6a143205ad2d.py``)."""
    if aliased(args):
        return args
    return [
        a.requires_grad_() if i in setting.requires_grad and a.is_floating_point() else a for i, a in enumerate(args)
    ]


# thunder 0.2.6 has no gradient rule for ``prims.index_add`` (stock thunder.jit raises this text on
# ``x.index_add_(0, i, y)`` with ``y`` requiring grad; docs/design.md, inputs that require grad)
NO_GRADIENT_RULE = r"^Failed to find a gradient transform for bound symbol bsym=t\d+ = prims\.index_add\("


def _differentiate(outputs, positions: list[int]) -> None:
    """The backward of the sum of ``outputs`` at ``positions`` (eager's differentiable outputs: thunder marks
    every output of a differentiated trace as requiring grad, eager only those that depend on an input that does)."""
    if positions:
        sum(outputs[i].sum() for i in positions).backward()


def _stock_thunder_fails_alike(error: Exception, fn, args: list, setting: GradSetting, positions: list[int]) -> bool:
    """Whether stock ``thunder.jit`` raises ``error`` too, in the call or its backward (the same type and text, up
    to numbers: proxy and region names), or the thunder error that ``error`` names (its cause: the extension
    names an in-place op's errors in its own compilations only)."""
    try:
        _differentiate(thunder.jit(fn)(*_with_grad(clone_args(args), setting)), positions)
    except Exception as stock:  # noqa: BLE001  (any other error is a difference)
        return any(
            type(stock) is type(e) and re.sub(r"\d+", "N", str(stock)) == re.sub(r"\d+", "N", str(e))
            for e in (error, error.__cause__)
        )
    return False


def _addresses(t: torch.Tensor) -> set[int]:
    """The storage elements ``t`` covers."""
    storage = torch.arange(t.untyped_storage().nbytes() // t.element_size())
    return set(torch.as_strided(storage, t.size(), t.stride(), t.storage_offset()).flatten().tolist())


def _layout(t: torch.Tensor) -> tuple:
    return t.storage_offset(), t.size(), t.stride()


def _reads_a_partial_overlap(func, args: tuple, kwargs: dict) -> bool:
    """Whether the in-place op ``func`` reads a tensor that shares elements with its target ``args[0]`` in another
    layout: eager's result then depends on the order it visits elements in (``v.t().mul_(v)``)."""
    name = getattr(func, "__name__", "")
    if not (name.endswith("_") and not name.startswith("__") or name == "__setitem__" or name.startswith("__i")):
        return False
    target, *rest = args
    if not isinstance(target, torch.Tensor):
        return False
    return any(
        source.untyped_storage().data_ptr() == target.untyped_storage().data_ptr()
        and _layout(source) != _layout(target)
        and bool(_addresses(source) & _addresses(target))
        for source in (*rest, *kwargs.values())
        if isinstance(source, torch.Tensor)
    )


class _RefusingPartialOverlap(torch.overrides.TorchFunctionMode):
    """Eager, raising where an in-place op reads a tensor that partially overlaps its target. Eager raises so itself
    where its check can tell (dense tensors: "some elements of the input tensor and the written-to tensor refer to a
    single memory location"); where it cannot (``r[:, 1:].t().mul_(r[:, 1:])``) it computes an order-dependent
    value that no program transformation is bound to reproduce (the fuzzer, ``found_a1129ffc4d16``): discarded as
    the ones it refuses."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _reads_a_partial_overlap(func, args, kwargs):
            raise RuntimeError(f"{getattr(func, '__name__', func)}: a source partially overlaps its target")
        return func(*args, **kwargs)


def check_against_eager(
    program: Program,
    scheduler: type[Transform] | None = None,
    *,
    fusion: type[Transform] | None = None,
    grad: GradSetting | None = None,
    device: torch.device = DEVICE,
    state: bool = False,
) -> None:
    """Outputs and every argument after the call match eager. Where arguments alias, the call may
    instead fail with one of the refusals docs/bad_input.md lists (``REFUSALS``), with every input
    untouched: thunder 0.2.6 cannot trace some aliasing (refused by the extension, or failing while
    tracing; docs/design.md#limits), and which depends on thunder's dead-code elimination, more than
    the program text says. ``scheduler`` (a ``Transform``, default ``program.scheduler``) reorders the
    final trace, as any pass that respects dataflow may, before the checker sees it; ``fusion`` (the
    stand-in nvFuser's pass, ``fake_nvfuser.FakeFusionPass``) then builds its regions.

    ``grad``: the arguments it names require grad and both runs are under its grad mode; where eager's
    outputs are differentiable, the gradients of their sum match eager's too. A program eager refuses (a
    write into a leaf that requires grad) is discarded, and what stock thunder cannot differentiate either
    may fail as it fails. ``device``: where the arguments are made. ``state``: the program runs as the forward of a
    module whose buffer is its first argument (``ReadingState``); the call may then be refused as
    ``aliased-with-a-global``, where a write meets the buffer."""
    grad = grad or GradSetting("grad", ())
    fn, make_args = program.load()
    with device:
        args = make_args()
    eager_args, jit_args = _with_grad(clone_args(args), grad), _with_grad(clone_args(args), grad)
    if state:  # the first argument is never a view (``programs``): the buffer, which the others may view
        eager_fn, jit_fn = ReadingState(fn, eager_args[0]), ReadingState(fn, jit_args[0])
    else:
        eager_fn = jit_fn = fn
    mode = GRAD_MODES[grad.mode]
    try:
        with mode(), _RefusingPartialOverlap():
            expected = eager_fn(*eager_args)
        differentiable = [i for i, o in enumerate(expected) if isinstance(o, torch.Tensor) and o.requires_grad]
        _differentiate(expected, differentiable)
    except RuntimeError:
        assume(False)  # eager refuses it too (e.g. partial overlap of a source and its target)
    try:
        transforms = [(scheduler or program.scheduler)(), *([fusion()] if fusion else [])]
        with mode():
            actual = thunder_ext.jit(jit_fn, transforms=transforms)(*jit_args)
        _differentiate(actual, differentiable)
    except Exception as error:
        if (
            grad.requires_grad
            and grad.mode == "grad"
            and (
                re.search(NO_GRADIENT_RULE, str(error))
                or _stock_thunder_fails_alike(error, fn, args, grad, differentiable)
            )
        ):
            return  # what thunder 0.2.6 cannot differentiate, as stock thunder.jit cannot
        if not (aliased(args) or state):
            raise
        check_documented_refusal(error, fn, args, jit_args)
        return
    assert_close(actual, expected)
    for i, (a, e) in enumerate(zip(jit_args, eager_args)):
        assert_close(a, e, msg=lambda m: f"argument {i} differs from eager after the call: {m}")
        if e.is_leaf and e.requires_grad:
            assert_close(a.grad, e.grad, msg=lambda m: f"gradient of argument {i} differs from eager: {m}")
