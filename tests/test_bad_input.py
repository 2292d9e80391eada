"""Bad input: one test per row of the table in docs/bad_input.md.

Each case must raise the listed error, and leave every input as eager PyTorch leaves it: untouched
where eager fails at the same statement or accepts the input (aliased arguments), and with earlier
writes done where eager fails only after them.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import thunder.torch as ltorch
import torch
from torch.testing import assert_close

import thunder_ext
from helpers import clone_args
from program_fuzzer import REFUSALS, refusal


def kv_write(k, pos, new):
    k.index_copy_(2, pos, new)
    return k.sum()


def kv_write_at_int(k, new):
    # a position as a Python int, where index_copy_ takes a tensor of positions
    k.index_copy_(2, 3, new)
    return k.sum()


def kv_write_next(k, pos, new):
    k.index_copy_(2, (pos + 1).long(), new)  # an int8 position wraps from 127 to -128
    return k.sum()


def add_to_leaf(w):
    w.add_(1.0)
    return w


def write_first_then_read(a, b):
    a.add_(1.0)
    return b * 2


SHARED = torch.ones(2, 3)  # a tensor the function reaches as a global, not as an argument


def write_argument_read_global(x):
    x.mul_(2.0)
    return SHARED.sum(0)


PAGES = torch.zeros(2, 3)  # two globals, one a row of the other
ROW = PAGES[1]


def write_global_row_read_global(x):
    ROW.add_(x)
    return PAGES.sum(0)


def write_second_read_others(a, b, c):
    b.add_(1.0)
    return a * 1, c * 1


def write_ignoring_second(a, unused, b):
    a.add_(b)
    return a.sum()


def index_add_ignoring_first(unused, x, y, pos):
    x.index_add_(0, pos, y)
    return x.sum()


def write_ignoring_two(unused, also_unused, a, b):
    a.add_(b)
    return a.sum()


def write_then_bad_index(x, y, pos, src):
    x.add_(1.0)
    y.index_copy_(0, pos, src)
    return x.sum()


def write_another_base_updated_at_a_bad_index(x, y, pos, src):
    y.copy_(x.index_copy(0, pos, src))


def bad_index_then_write(x, y, pos, src):
    y.index_copy_(0, pos, src)
    x.add_(1.0)
    return x.sum()


def scatter_write(**options):
    def write(k, new, idx, cu=None):
        thunder_ext.tensor_scatter_(k, new, idx, cu_seqlens=cu, **options)
        return k.sum()

    return write


def scatter_two(k, v, new, good, bad):
    thunder_ext.tensor_scatter_(k, new, good)
    thunder_ext.tensor_scatter_(v, new, bad)
    return k.sum()


def scatter_two_failing_first(k, v, new, good, bad):
    thunder_ext.tensor_scatter_(v, new, bad)
    thunder_ext.tensor_scatter_(k, new, good)
    return k.sum()


def scatter_args(new_shape=(2, 2, 1, 3), idx=(1, 2), cu=None, **kw):
    """A cache (2, 2, 4, 3), an update, write indices, and ``cu_seqlens`` if given."""
    args = [torch.randn(2, 2, 4, 3), torch.randn(new_shape, **kw), torch.tensor(idx)]
    return args if cu is None else [*args, torch.tensor(cu)]


def two_caches(bad):
    return [torch.randn(2, 2, 4, 3), torch.randn(2, 2, 4, 3), torch.randn(2, 2, 1, 3), torch.tensor([0, 3]), torch.tensor(bad)]


def direct_copy_to_out(a, b):
    thunder_ext.copy_to_out_(a, out=b)
    return b


def copy_into(x, y):
    x.copy_(y)
    return x


def add_into(x, y):
    x.add_(y)
    return x


def cache():
    return torch.randn(1, 2, 4, 3)


def token(**kw):
    return torch.randn(1, 2, 1, 3, **kw)


@dataclass
class Case:
    id: str
    fn: Callable
    make_args: Callable[[], list]
    error: type[BaseException]
    match: str


def _transposed(x):
    return [x, x.t()]


CASES = [
    Case("shape", kv_write, lambda: [cache(), torch.tensor([1]), torch.randn(1, 2, 1, 5)], RuntimeError,
         r"index_copy_: cannot write into self \(float32, shape \(1, 2, 4, 3\)\) from .*source \(float32, shape "
         r"\(1, 2, 1, 5\)\) at .*: `k.index_copy_\(2, pos, new\)`: .*dimensions of a .* and value"),
    Case("dtype", kv_write, lambda: [cache(), torch.tensor([1]), token(dtype=torch.float64)], RuntimeError,
         r"index_copy_: cannot write into self \(float32, .* source \(float64, .*`k.index_copy_\(2, pos, new\)`"),
    Case("copy-shape", copy_into, lambda: [torch.zeros(2, 4), torch.ones(3)], RuntimeError,
         r"copy_: cannot write into self \(float32, shape \(2, 4\)\) from b \(float32, shape \(3,\)\) at .*: "
         r"`x.copy_\(y\)`: expand"),
    Case("add-shape", add_into, lambda: [torch.zeros(2, 4), torch.ones(3)], RuntimeError,
         r"add_: cannot write into self \(float32, shape \(2, 4\)\) from b \(float32, shape \(3,\)\) at .*: "
         r"`x.add_\(y\)`: .*broadcast"),
    Case("device", direct_copy_to_out, lambda: [torch.randn(3), torch.empty(3, device="meta")],
         thunder_ext.CopyToOutError, r"copy_to_out_: cannot write `\w+` into `\w+`: device .*cpu.* vs .*meta"),
    Case("copy-to-out-shape", direct_copy_to_out, lambda: [torch.randn(3), torch.empty(4)],
         thunder_ext.CopyToOutError, r"copy_to_out_: cannot write `\w+` into `\w+`: shape \(3,\) vs \(4,\)"),
    Case("int-position", kv_write_at_int, lambda: [cache(), token()], TypeError,
         r"^index_copy_: cannot write into self \(float32, shape \(1, 2, 4, 3\)\) from source \(float32, shape "
         r"\(1, 2, 1, 3\)\) at .*test_bad_input\.py:\d+: `k\.index_copy_\(2, 3, new\)`: `index` must be a tensor, "
         r"got int 3$"),
    Case("float-positions", kv_write, lambda: [cache(), torch.tensor([1.0]), token()], RuntimeError, r"index"),
    Case("int32-positions", kv_write, lambda: [cache(), torch.tensor([1], dtype=torch.int32), token()], RuntimeError,
         r"^index_copy_: cannot write into self \(float32, .*\) from index \(int32, shape \(1,\)\), .* at "
         r".*test_bad_input\.py:\d+: `k\.index_copy_\(2, pos, new\)`: index_copy_\(\): Expected a long tensor for index"),
    Case("out-of-range", kv_write, lambda: [cache(), torch.tensor([100]), token()], IndexError,
         r"^index_copy_: cannot write into self \(float32, shape \(1, 2, 4, 3\)\) from index \(int64, shape \(1,\)\), "
         r"source \(float32, shape \(1, 2, 1, 3\)\) at .*test_bad_input\.py:\d+: `k\.index_copy_\(2, pos, new\)`: "
         r"index_copy_\(\): index 100 is out of bounds for dimension 2 with size 4$"),
    Case("negative-position", kv_write, lambda: [cache(), torch.tensor([-1]), token()], IndexError,
         r"index -1 is out of bounds"),
    Case("position-overflow", kv_write_next, lambda: [cache(), torch.tensor([127], dtype=torch.int8), token()],
         IndexError, r"index -128 is out of bounds"),
    Case("huge-position", kv_write, lambda: [cache(), torch.tensor([2**40]), token()], IndexError, r"out of bounds"),
    Case("leaf-requires-grad", add_to_leaf, lambda: [torch.ones(3, requires_grad=True)], RuntimeError,
         r"^thunder_ext.jit: `add_` writes into argument `w` \(.*\), which is a leaf that requires grad, so nothing was "
         r"run: a leaf Variable that requires grad is being used in an in-place operation\.$"),
    Case("non-leaf-requires-grad", add_to_leaf, lambda: [torch.ones(3, requires_grad=True) * 1],
         thunder_ext.ArgumentWriteGradientError,
         r"^thunder_ext.jit: `add_` writes into argument `w` \(.*\), which requires grad: eager makes the write part "
         r"of its autograd history, but thunder 0\.2\.6 would give its value before the write no gradient"),
    Case("aliased-transposed-view", write_first_then_read, lambda: _transposed(torch.randn(3, 2)),
         thunder_ext.AliasedArgumentsError, r"arguments 0 and 1 .* share storage as different views"),
    Case("aliased-overlapping-slices", write_first_then_read, lambda: (lambda x: [x[0:2], x[1:3]])(torch.randn(4, 2)),
         thunder_ext.AliasedArgumentsError, r"share storage as different views"),
    Case("aliased-views-of-one-size-among-others", write_second_read_others,
         lambda: (lambda x: [x[0], x[1], x])(torch.randn(3, 2)), thunder_ext.AliasedArgumentsError,
         r"arguments 0 and 1 \(flattened positions\) share storage as different views"),
    Case("aliased-unused-duplicate", write_ignoring_second, lambda: (lambda x: [x, x, torch.randn(2)])(torch.randn(2)),
         thunder_ext.AliasedArgumentsError, r"arguments 0, 1 \(flattened positions\) share storage.*does not use every"),
    Case("aliased-after-an-unused-argument", write_ignoring_second, lambda: (lambda x: [x, torch.randn(2), x])(torch.randn(2)),
         thunder_ext.AliasedArgumentsError, r"arguments 0, 2 \(flattened positions\) share storage.*does not use every"),
    Case("aliased-with-a-global", write_argument_read_global, lambda: [SHARED], thunder_ext.AliasedArgumentsError,
         r"^thunder_ext\.jit: an argument \(shape \(2, 3\), .*\) shares storage with a tensor the function takes from "
         r"elsewhere .*, and `mul_` writes into `x` \(.*test_bad_input\.py:\d+: x\.mul_\(2\.0\)\), so nothing was run"),
    Case("aliased-state", write_global_row_read_global, lambda: [torch.ones(3)], thunder_ext.AliasedArgumentsError,
         r"^thunder_ext\.jit: `\w+` and `\w+`, two tensors the function takes from a module or elsewhere \(not from "
         r"the call's arguments\), share storage, and `add_` writes into `\w+` \(.*test_bad_input\.py:\d+: "
         r"ROW\.add_\(x\)\), so nothing was run"),
    Case("aliased-position-on-another-argument", index_add_ignoring_first,
         lambda: (lambda y: [y, torch.randn(2), y, torch.tensor([0, 1])])(torch.randn(2)),
         RuntimeError, r"index dtype=.* was not an integer dtype"),
    Case("aliased-position-past-the-arguments", write_ignoring_two,
         lambda: (lambda x: [torch.randn(2), torch.randn(2), x, x])(torch.randn(2)), IndexError,
         r"list index out of range"),
    Case("bad-index-before-a-write", bad_index_then_write,
         lambda: [torch.zeros(3), torch.zeros(3), torch.tensor([7]), torch.ones(1)], IndexError, r"out of bounds"),
    Case("bad-index-of-another-base", write_another_base_updated_at_a_bad_index,
         lambda: [torch.ones(3), torch.zeros(3), torch.tensor([7]), torch.ones(1)], IndexError, r"out of bounds"),
    Case("bad-index-after-a-write", write_then_bad_index,
         lambda: [torch.zeros(3), torch.zeros(3), torch.tensor([7]), torch.ones(1)], IndexError, r"out of bounds"),
    Case("scatter-mode", scatter_write(mode="wrap"), scatter_args, ValueError,
         r"tensor_scatter_: `mode` must be one of \('linear', 'circular'\), got 'wrap'"),
    Case("scatter-axis-0", scatter_write(axis=0), scatter_args, ValueError,
         r"tensor_scatter_: `axis` must name a sequence axis .* other than the batch axis 0, got 0"),
    Case("scatter-axis-out-of-range", scatter_write(axis=4), scatter_args, ValueError, r"tensor_scatter_: `axis` .* got 4"),
    Case("scatter-update-shape", scatter_write(), lambda: scatter_args((2, 2, 1, 5)), ValueError,
         r"tensor_scatter_: `update` must have shape \(2, 2, n, 3\) with n <= 4 .* got \(2, 2, 1, 5\)"),
    Case("scatter-update-longer-than-cache", scatter_write(), lambda: scatter_args((2, 2, 5, 3)), ValueError,
         r"tensor_scatter_: `update` must have shape .* n <= 4"),
    Case("scatter-update-dtype", scatter_write(), lambda: scatter_args(dtype=torch.float64), TypeError,
         r"tensor_scatter_: `update` must be .*float32"),
    Case("scatter-float-indices", scatter_write(), lambda: scatter_args(idx=(1.0, 2.0)), TypeError,
         r"tensor_scatter_: `write_indices` must be an integer tensor"),
    Case("scatter-indices-length", scatter_write(), lambda: scatter_args(idx=(1, 2, 3)), ValueError,
         r"tensor_scatter_: `write_indices` must have shape \(2,\), got \(3,\)"),
    Case("scatter-linear-past-end", scatter_write(), lambda: scatter_args(idx=(1, 4)), IndexError,
         r"tensor_scatter_: `write_indices\[1\]` = 4 with 1 tokens writes outside the 4 positions .* linear mode"),
    Case("scatter-negative-index", scatter_write(), lambda: scatter_args(idx=(-1, 0)), IndexError,
         r"tensor_scatter_: `write_indices\[0\]` = -1"),
    Case("scatter-packed-update-shape", scatter_write(), lambda: scatter_args((3, 3, 3), cu=(0, 1, 3)), ValueError,
         r"tensor_scatter_: `update` must have shape \(T, 2, 3\)"),
    Case("scatter-cu-seqlens-length", scatter_write(), lambda: scatter_args((3, 2, 3), cu=(0, 3)), ValueError,
         r"tensor_scatter_: `cu_seqlens` must have shape \(3,\), got \(2,\)"),
    Case("scatter-cu-seqlens-float", scatter_write(), lambda: scatter_args((3, 2, 3), cu=(0.0, 1.0, 3.0)), TypeError,
         r"tensor_scatter_: `cu_seqlens` must be an integer tensor"),
    Case("scatter-cu-seqlens-total", scatter_write(), lambda: scatter_args((3, 2, 3), cu=(0, 1, 4)), ValueError,
         r"tensor_scatter_: `cu_seqlens` must rise from 0 to the 3 tokens of `update`, got \[0, 1, 4\]"),
    Case("scatter-cu-seqlens-longer-than-cache", scatter_write(), lambda: scatter_args((6, 2, 3), idx=(0, 0), cu=(0, 1, 6)),
         ValueError, r"tensor_scatter_: `cu_seqlens` gives a sequence more tokens than the cache's 4 positions"),
    Case("scatter-past-end-after-a-write", scatter_two, lambda: two_caches([0, 4]), IndexError,
         r"tensor_scatter_: `write_indices\[1\]` = 4"),
    Case("scatter-past-end-before-a-write", scatter_two_failing_first, lambda: two_caches([0, 4]), IndexError,
         r"tensor_scatter_: `write_indices\[1\]` = 4"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_raises_and_leaves_inputs_as_eager_does(case: Case, executor_set):
    args = case.make_args()
    before, eager_args = clone_args(args), clone_args(args)
    try:
        case.fn(*eager_args)
        expected = before  # eager accepts it: the refusal must not have written anything
    except Exception:
        expected = eager_args
    with pytest.raises(case.error, match=case.match) as raised:
        thunder_ext.jit(case.fn)(*args)
    assert raised.type is case.error
    for i, (a, e) in enumerate(zip(args, expected)):
        if a.device.type != "meta":
            assert_close(a.detach(), e.detach(), msg=lambda m: f"argument {i} differs from eager after the error: {m}")


@pytest.mark.executor_sets("defaults")  # compiles nothing
@pytest.mark.parametrize("symbol", [*ltorch._inplace_to_out_of_place, ltorch.copy_], ids=lambda s: s.name)
def test_every_in_place_op_names_itself_in_its_trace_time_errors(symbol):
    thunder_ext.adapt_thunder()
    assert getattr(symbol.meta, "names_errors", False)


@pytest.mark.parametrize("documented", REFUSALS, ids=[r.case for r in REFUSALS])
def test_the_fuzzer_accepts_a_failure_as_the_documented_case_it_names(documented):
    (case,) = [c for c in CASES if c.id == documented.case]
    with pytest.raises(case.error) as raised:
        thunder_ext.jit(case.fn)(*case.make_args())
    assert refusal(raised.value) == documented


def test_the_docs_table_lists_exactly_these_cases():
    table = (Path(__file__).parents[1] / "docs" / "bad_input.md").read_text()
    documented = re.findall(r"^\| `([\w-]+)` \|", table, flags=re.M)
    assert documented == [c.id for c in CASES]


# tensor_scatter_ outside the jit: the same checks, from the eager function itself
SCATTER_BAD_INPUT = [c for c in CASES if c.id.startswith("scatter-")]
WRITES_BEFORE_FAILING = {"scatter-past-end-after-a-write"}  # its first cache is written, as it should be


@pytest.mark.parametrize("case", SCATTER_BAD_INPUT, ids=[c.id for c in SCATTER_BAD_INPUT])
def test_tensor_scatter_in_eager_raises_naming_the_argument_before_writing(case):
    args = case.make_args()
    before = [a.clone() for a in args]
    with pytest.raises(case.error, match=case.match):
        case.fn(*args)
    untouched = args[1:] if case.id in WRITES_BEFORE_FAILING else args
    assert all(torch.equal(a, b) for a, b in zip(untouched, before[len(args) - len(untouched):]))
