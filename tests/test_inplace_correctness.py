"""Every in-place path against eager PyTorch: outputs and mutated inputs."""

import pytest
import torch
import thunder

import thunder_ext
from helpers import assert_matches_eager, functionalized_trace, writes_in
from helpers import HoistReads, HoistWrites, SinkReads


def test_thunder_pr_failing_case_index_copy_then_sdpa():
    # The case that broke thunder's copy_to_out_ pull request: q and k are written, then read by SDPA.
    def f(q, k, v, mask, idx, src):
        q.index_copy_(2, idx, src)
        k.index_copy_(2, idx, src)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, mask)

    q, k, v = torch.randn(1, 4, 2, 16), torch.randn(1, 4, 3, 16), torch.randn(1, 4, 3, 16)
    mask = torch.ones(1, 1, 2, 3, dtype=torch.bool)
    jfn = assert_matches_eager(f, q, k, v, mask, torch.arange(2), torch.randn(1, 4, 2, 16))
    # with the torch.compile executor too: a write at two positions leaves its region (executors/torch_compile_inplace.py, rule 4)
    hows = [d.how for d in thunder_ext.inplace_decisions(jfn)]
    assert len(hows) == 2 and all(how.startswith("in place at the") for how in hows), hows


def test_write_chain_is_one_write_and_intermediate_readers_see_the_intermediate():
    def f(x, y):
        x.add_(y)
        z = x * 3  # reads the intermediate value
        x.mul_(2)
        return z, x + 0

    jfn = assert_matches_eager(f, torch.randn(5), torch.randn(5))
    assert len(writes_in(functionalized_trace(jfn))) == 1


@pytest.mark.parametrize(
    "f",
    [
        lambda x: (x.zero_(), x.unsqueeze(0).fill_(-2.0)),  # a write through a view of a pending value
        lambda x: (x.add_(1), v := x.view(-1), x.mul_(2), v)[-1],  # a view taken between writes sees both
    ],
    ids=["write-through-view-of-pending-value", "view-between-chained-writes"],
)
def test_views_of_a_pending_write_alias_the_target_not_the_value(f):
    # found by the fuzzer: views of a written-but-not-yet-stored value were views of the intermediate
    assert_matches_eager(f, torch.randn(3))


@pytest.mark.parametrize(
    "f, target, source",
    [
        (lambda x, s: x.copy_(s), (3, 4), (4,)),
        (lambda x, s: x.copy_(s), (1, 1), (1,)),
        (lambda x, s: (x.unsqueeze(0), x.copy_(s), x * 2)[-1], (1, 1), (1,)),  # found by the fuzzer
        (lambda x, s: x[1:].copy_(s), (3, 2), (1, 2)),
    ],
    ids=["row-into-matrix", "leading-dim", "after-a-view", "into-a-view"],
)
def test_copy_from_a_broadcastable_source(f, target, source):
    # thunder 0.2.6 refuses these ("Shapes were expected to be the same"); the extension broadcasts as torch does (adapt_thunder)
    assert_matches_eager(f, torch.randn(target), torch.randn(source))


def test_reads_before_and_after_write():
    def f(x, src, idx):
        before = x.sum()
        x.index_copy_(0, idx, src)
        after = x.sum()
        return before, after, x * 2

    assert_matches_eager(f, torch.randn(6, 3), torch.randn(2, 3), torch.tensor([4, 1]))


def test_reader_of_old_value_scheduled_after_computed():
    def f(x, y):
        c = y * 2  # computed before the read of the old x
        old = x.sum()
        x.copy_(c)
        return old

    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4))
    (write,) = writes_in(functionalized_trace(jfn))
    assert write.kwargs["after"], "the reader of the old x must be an ordering edge of the write"


@pytest.mark.parametrize(
    "write",
    [
        lambda k, new, pos: k[:1, ...].index_copy_(2, pos, new),
        lambda k, new, pos: k[1].index_copy_(1, pos, new[0]),
        lambda k, new, pos: k.transpose(1, 2)[:1].index_copy_(1, pos, new.transpose(1, 2)),
        lambda k, new, pos: k.view(2, 2, -1).mul_(2),
        lambda k, new, pos: k.narrow(2, 1, 2).mul_(3.0),
        lambda k, new, pos: k[:, :, 1:3].add_(1.0),
    ],
    ids=["slice", "select", "transpose-slice", "view", "narrow", "slice-range"],
)
def test_writes_through_views_reach_the_base(write):
    def f(k, new, pos):
        out = write(k, new, pos)
        return out * 1, k.sum(dim=(1, 3))

    assert_matches_eager(f, torch.randn(2, 2, 4, 3), torch.randn(1, 2, 1, 3), torch.tensor([2]))


@pytest.mark.parametrize(
    "op",
    [
        lambda x, y, m, i: x.add_(y, alpha=2),
        lambda x, y, m, i: x.sub_(y).mul_(y).div_(2.0),
        lambda x, y, m, i: x.masked_fill_(m, -1.0),
        lambda x, y, m, i: x.scatter_(0, i, y),
        lambda x, y, m, i: x.scatter_add_(0, i, y),
        lambda x, y, m, i: x.index_put_((i,), y[: len(i)]),
        lambda x, y, m, i: x.index_add_(0, i, y[: len(i)]),
        lambda x, y, m, i: x.__setitem__(slice(1, 3), y[:2]),
        lambda x, y, m, i: x.__setitem__(i, 5.0),
        lambda x, y, m, i: x.copy_(y[0]),  # broadcasting source
        lambda x, y, m, i: x.zero_(),
        lambda x, y, m, i: x.lerp_(y, 0.3).addcmul_(y, y, value=0.5),
        lambda x, y, m, i: x.clamp_(-0.5, 0.5),
    ],
    ids=[
        "add_", "sub_mul_div_", "masked_fill_", "scatter_", "scatter_add_", "index_put_", "index_add_",
        "setitem-slice", "setitem-index", "copy_-broadcast", "zero_", "lerp_addcmul_", "clamp_",
    ],
)
def test_inplace_ops_match_eager(op):
    def f(x, y, m, i):
        r = op(x, y, m, i)
        return x * 1 if r is None else r * 1

    assert_matches_eager(f, torch.randn(6), torch.randn(6), torch.rand(6) > 0.5, torch.tensor([3, 0]))


@pytest.mark.parametrize("alias", [lambda x: x, lambda x: x.view(-1)], ids=["same-tensor", "flat-view"])
def test_aliased_arguments(alias):
    def f(x, other):
        x.add_(1.0)
        return other * 2

    x = torch.randn(3, 4)
    assert_matches_eager(f, x, alias(x))


def write_then_read(a, b):
    a.add_(1.0)
    return b * 2


def write_through_one_then_read_the_other(a, b):
    b.mul_(2.0)
    return a * 1, b + 1


def read_then_write(a, b):
    r = b * 2
    a.add_(1.0)
    return r, b + 0


def compute_then_read_then_write(a, b):
    c = b.exp()  # the write's producer, before a read of b's old storage through a
    r = a.sum(0)
    b.copy_(c)
    return r


OTHER_SIZE_VIEWS = {
    "row": lambda x: [x, x[0]],
    "rows": lambda x: [x, x[1:]],
    "view-first": lambda x: [x[1], x],
    "column": lambda x: [x, x[:, 1]],  # not contiguous, from offset 1
    "column-of-transpose": lambda x: [x, x.t()[0]],
}


@pytest.mark.parametrize("alias", OTHER_SIZE_VIEWS.values(), ids=OTHER_SIZE_VIEWS.keys())
@pytest.mark.parametrize(
    "f", [write_then_read, write_through_one_then_read_the_other, read_then_write, compute_then_read_then_write]
)
def test_aliased_arguments_of_other_sizes(f, alias):
    assert_matches_eager(f, *alias(torch.randn(3, 2)))


@pytest.mark.executor_sets("defaults")  # the adversaries reschedule the ops the PyTorch executor runs
@pytest.mark.parametrize("adversary", [SinkReads, HoistWrites, HoistReads], ids=lambda a: a.__name__)
@pytest.mark.parametrize("f", [read_then_write, compute_then_read_then_write, write_then_read])
def test_aliased_arguments_of_other_sizes_order_by_dataflow(f, adversary):
    # no op of the trace relates the two arguments: only `share_storage` tells the functionalizer that
    # they share storage, and so that the write must follow the other's readers by dataflow
    assert_matches_eager(f, *OTHER_SIZE_VIEWS["row"](torch.randn(3, 2)), transforms=[adversary()])


def test_aliased_arguments_of_other_sizes_share_storage_for_the_checker():
    # in place, `a * b` would write rows of a before it reads the row b is
    def scale_by_row(a, b):
        a.copy_(a * b)
        return a.sum()

    x = torch.randn(3, 2)
    jfn = assert_matches_eager(scale_by_row, x, x[1])
    ((how, reason),) = [(d.how, d.reason) for d in thunder_ext.inplace_decisions(jfn)]
    assert how == "copy" and "shares storage" in reason


def test_aliased_arguments_of_other_sizes_with_one_of_the_first_size():
    def f(a, flat, row):
        flat.add_(1.0)  # flat is traced as a reshape of a; row as itself
        r = row * 2
        a.mul_(3.0)
        return r, row * 1, flat * 1

    x = torch.randn(3, 2)
    assert_matches_eager(f, x, x.view(-1), x[0])


def test_a_later_call_with_other_views_of_the_same_shapes_reuses_the_entry_and_matches_eager():
    # the trace assumes no layout of an argument of another size: the entry is right for any
    jfn = thunder_ext.jit(write_through_one_then_read_the_other)
    for view in (lambda x: x[0], lambda x: x[2], lambda x: x[:2, 1], lambda x: x.t()[0, 1:]):
        x = torch.randn(3, 2)
        assert_matches_eager(write_through_one_then_read_the_other, x, view(x), jit=lambda f: jfn)
    assert (thunder.cache_misses(jfn), thunder.cache_hits(jfn)) == (1, 3)


def test_aliased_arguments_of_other_sizes_that_need_autograd_compile_then_are_refused_untouched():
    # thunder's autograd knows no share_storage: its grad pass dropped it, and the computation read an unbound name.
    # The compilation now goes through; the call is refused (transforms/grad_argument_writes.py), since thunder 0.2.6
    # gives the written argument's old value no gradient (the outputs did not even require grad)
    w = torch.randn(3, 2, requires_grad=True)
    x = w * 1
    with pytest.raises(thunder_ext.ArgumentWriteGradientError, match=r"`mul_` writes into argument `b` .*requires grad"):
        thunder_ext.jit(write_through_one_then_read_the_other)(x, x[0])
    torch.testing.assert_close(x, w * 1)


def test_stock_thunder_still_fails_on_aliased_arguments_of_other_sizes():
    # the fix serves the extension's compilations only: with thunder's torch.compile executor it would
    # give wrong values (torch.compile rule 5, tests/test_torch_compile_regions.py)
    x = torch.randn(3, 2)
    with pytest.raises(RuntimeError, match=r"^Attempting to reshape a\.shape=\(3, 2\) to shape=\(2,\)"):
        thunder.jit(write_then_read)(x, x[0])


def overlapping_source(x, idx):
    # Functional index_copy reading a view of x, written into x: in place, source and target overlap.
    x.copy_(torch.index_copy(x, 0, idx, x[:1]))
    return x * 1


@pytest.mark.executor_sets("defaults")  # the PyTorch executor's overlap rule; Inductor runs the write itself
def test_source_overlapping_target_falls_back_to_copy():
    f = overlapping_source

    jfn = assert_matches_eager(f, torch.randn(4, 2), torch.tensor([3]))
    decisions = thunder_ext.inplace_decisions(jfn)
    assert [d.how for d in decisions] == ["copy"]
    assert "shares storage" in decisions[0].reason


@pytest.mark.parametrize(
    "f, how",
    [
        (lambda x: x[:2].add_(x[2:]), "in place at the write"),  # disjoint rows of one tensor
        (lambda x: x[:, :1].mul_(x[:, 2:]), "in place at the write"),  # disjoint columns
        (lambda x: x[::2].sub_(x[1::2]), "in place at the write"),  # interleaved rows
        (lambda x: x[1:3].copy_(x[:2] * 2), "copy"),  # the rows overlap: in place would read row 1 written
        (lambda x: x.t()[:1].add_(x.t()[1:2]), "copy"),  # slices of a transposed view: not proved disjoint
    ],
    ids=["rows", "columns", "interleaved", "overlapping", "through-a-transpose"],
)
def test_slices_of_one_tensor_run_in_place_where_provably_disjoint(f, how):
    # under torch.compile too: the region returns x * 1, computed from the written x (torch.compile rule 6),
    # so the write leaves it and the PyTorch executor's proof decides
    jfn = assert_matches_eager(lambda x: (f(x), x * 1)[1], torch.randn(4, 3))
    assert [d.how for d in thunder_ext.inplace_decisions(jfn)] == [how]


class Cache(torch.nn.Module):
    def __init__(self, length=8):
        super().__init__()
        self.register_buffer("k", torch.zeros(2, 2, length, 3), persistent=False)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64), persistent=False)

    def forward(self, pos, new):
        k = self.k[:1, ...].index_copy_(2, pos, new)
        self.steps.add_(1)
        return k.sum(dim=-1)


def test_module_buffers_are_written_in_place_and_keep_their_storage():
    eager, jitted = Cache(), Cache()
    jm = thunder_ext.jit(jitted)
    ptr = jitted.k.data_ptr()
    for step in range(4):
        pos, new = torch.tensor([step]), torch.randn(1, 2, 1, 3)
        torch.testing.assert_close(jm(pos, new), eager(pos, new))
        torch.testing.assert_close(jitted.k, eager.k)
        torch.testing.assert_close(jitted.steps, eager.steps)
    assert jitted.k.data_ptr() == ptr
    assert all(d.how != "copy" for d in thunder_ext.inplace_decisions(jm))


@pytest.mark.executor_sets("defaults")
def test_strict_raises_naming_the_write_and_the_tensor():
    x = torch.randn(4, 2)
    before = x.clone()
    with pytest.raises(thunder_ext.UnprovenInplaceError, match=r"copy_to_out_\(.*out=.*shares storage"):
        thunder_ext.jit(overlapping_source, strict=True)(x, torch.tensor([3]))
    torch.testing.assert_close(x, before)


def test_jit_keeps_caller_executors_and_transforms():
    from thunder.core.transforms import Transform

    class Marker(Transform):
        seen = False

        def transform_traces_pre_prologue(self, pro, comp, epi, **kwargs):
            Marker.seen = True
            return pro, comp, epi

    jfn = thunder_ext.jit(lambda x: x.add_(1), executors=["torch"], transforms=[Marker()])
    jfn(torch.zeros(2))
    assert Marker.seen
    assert [ex.name for ex in thunder.compile_data(jfn).executors_list][1:3] == ["thunder_ext_inplace", "torch"]


@pytest.mark.parametrize(
    "fn",
    [lambda x: torch.nn.functional.relu(x, inplace=True), lambda x: torch.nn.functional.threshold_(x, 0.1, 20.0)],
    ids=["relu_", "threshold_"],
)
def test_inplace_activation_whose_where_takes_a_number(fn):
    # relu is where(x > 0, x, 0): the in-place form must accept the number (torch.where(..., out=) does not)
    assert_matches_eager(fn, torch.randn(4, 3))
