"""Writes inside thunder's torch.compile executor regions (transforms/fusion_regions.py, ``TORCH_COMPILE``).

Each rule with a program that breaks without it, on the real executor (Inductor on the CPU). Stock
``thunder.jit`` with the same executors gives wrong values on two of them; the extension must not.
"""

import pytest
import thunder
import torch

import thunder_ext
from helpers import assert_matches_eager
from thunder_ext.benchmarks.measure import allocations

pytestmark = pytest.mark.executor_sets("torch_compile")

CPU = torch.device("cpu")


def decisions(jfn) -> list[tuple[str, str]]:
    return [(d.how, d.reason) for d in thunder_ext.inplace_decisions(jfn)]


def test_an_elementwise_update_stays_in_its_region_and_allocates_nothing_of_its_size():
    def f(x, y):
        x.mul_(0.9).add_(y)

    x, y = torch.randn(1 << 20), torch.randn(1 << 20)
    jfn = assert_matches_eager(f, x, y)
    assert [how for how, _ in decisions(jfn)] == ["in a torch.compile region"]
    # Inductor re-inplaces the write: nothing of x's size (4 MiB) is allocated per call
    assert allocations(lambda: jfn(x, y), CPU).largest < x.nbytes


def test_allocations_see_what_inductor_allocates():
    # the check above can fail: a region that returns a new tensor of x's size shows it
    jfn = thunder.jit(lambda x: x * 2)
    x = torch.randn(1 << 20)
    jfn(x)
    assert allocations(lambda: jfn(x), CPU).largest >= x.nbytes


def test_rule_1_a_copy_of_a_region_input_leaves_the_region():
    # Inductor lowers y's new value as x itself, so x's later write would reach y (stock thunder: y == 3x)
    def f(x, y):
        y.copy_(x)
        x.mul_(3)
        return x + y

    jfn = assert_matches_eager(f, torch.randn(3), torch.randn(3))
    (copy, mul) = decisions(jfn)
    assert copy[0] == "copy" and "is not computed in" in copy[1]
    assert mul[0] == "in a torch.compile region"


@pytest.mark.parametrize("shape", [(4,), (4, 2)], ids=["1d", "2d"])
@pytest.mark.parametrize("positions", [[9], [1, 9]], ids=["one", "one-of-two"])
def test_rule_2_an_index_out_of_range_leaves_the_cache_as_eager_does(positions, shape):
    # Inductor checks each index where it stores: for a 1-D cache at [1, 9] it writes k[1] and then fails,
    # where eager writes nothing (for a 2-D one, eager's own kernel writes row 1 first)
    def f(k, pos, new):
        k.index_copy_(0, pos, new)
        return k.sum()

    def call(fn, k):
        with pytest.raises(IndexError, match="index 9 is out of bounds"):
            fn(k, torch.tensor(positions), torch.ones(len(positions), *shape[1:]))
        return k

    assert torch.equal(call(thunder_ext.jit(f), torch.zeros(shape)), call(f, torch.zeros(shape)))


def test_rule_2_a_kv_write_leaves_its_region_and_runs_in_place():
    def f(k, v, pos, new_k, new_v):
        k.index_copy_(2, pos, new_k)
        v.index_copy_(2, pos, new_v)
        return (k * v).sum()

    k, v = torch.zeros(1, 4, 4096, 64), torch.zeros(1, 4, 4096, 64)
    args = (k, v, torch.tensor([7]), torch.randn(1, 4, 1, 64), torch.randn(1, 4, 1, 64))
    jfn = assert_matches_eager(f, *args)
    for how, reason in decisions(jfn):
        assert how.startswith("in place at the") and "may fail at runtime" in reason, reason
    assert allocations(lambda: jfn(*args), CPU).largest < k.nbytes


def test_no_region_recomputes_a_value_across_a_write():
    # rematerialization recomputed t * 2 in a later region from x, losing the write into t[0]
    def f(x, y):
        t = x * 2
        t[0].add_(1)
        y.mul_(t.sum())
        return t

    assert_matches_eager(f, torch.randn(3, 4), torch.randn(3))


@pytest.mark.parametrize(
    "f, make_args",
    [
        (lambda x: (x.view(-1).add_(1), x * 2)[-1], lambda: [torch.randn(3, 4)]),
        (
            lambda cache, slots, new: (cache.view(-1, cache.shape[-1]).index_copy_(0, slots, new), cache.sum())[-1],
            lambda: [torch.randn(4, 8, 16), torch.tensor([3, 17]), torch.randn(2, 16)],
        ),
    ],
    ids=["through-a-view-to-its-base", "paged-through-a-flattened-view"],
)
def test_a_region_that_runs_in_order_is_checked_op_by_op(f, make_args):
    # read as one op, the later region reads the written storage through names made before the write
    # (a view it renames): the ordering check raised InplaceOrderingError on these valid programs
    assert_matches_eager(f, *make_args())
