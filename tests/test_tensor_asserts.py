"""A user's ``assert`` on a tensor's value (``thunder_ext.thunder026.tensor_asserts``): checked when the computation runs,
before any write, raising eager's ``AssertionError``; any other branch on a tensor's value is refused naming the
user's line and ``thunder_ext.thunderfx``.

PYTEST_DONT_REWRITE: pytest rewrites a test module's ``assert`` into an ``if`` that raises, which is no
``assert`` (``LOAD_ASSERTION_ERROR``) for the interpreter; the models here assert as the user's code does.
"""

import re

import pytest
import thunder
import torch
from thunder.core.transforms import Transform
from torch.testing import assert_close

import thunder_ext
from helpers import hoist


class BoundedCache(torch.nn.Module):
    """A cache that checks its bounds before it writes (the issue's example)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(1, 2, 16, 4))
        self.register_buffer("cache_pos", torch.zeros(1, dtype=torch.long))

    def forward(self, k):
        seq_len = k.shape[2]
        assert (self.cache_pos[0] + seq_len) <= self.k_cache.shape[2]
        pos = self.cache_pos[0] + torch.arange(seq_len)
        self.k_cache.index_copy_(2, pos, k)
        self.cache_pos.add_(seq_len)
        return self.k_cache * 2


class HoistIndexing(Transform):
    """An adversarial scheduler: ops that index run as early as dataflow allows."""

    def transform_trace_post_optimization(self, trace, **kwargs):
        return hoist(trace, lambda bsym: "index" in bsym.sym.name)


@pytest.mark.parametrize("transforms", [[], [HoistIndexing()]], ids=["as scheduled", "indexing hoisted"])
def test_an_assert_on_a_tensor_is_checked_before_any_write_as_eager_checks_it(transforms, executor_set):
    # under the adversary, the index_copy_ that the assert guards still fails at the assert, not with an IndexError
    eager, model = BoundedCache(), BoundedCache()
    jitted = thunder_ext.jit(model, transforms=transforms)
    # 8 + 6 fit in 16 positions; 4 more fail the assert (and would write past the end, an IndexError, were
    # the index_copy run first); a call of 2 then fits again
    for n in (8, 6, 4, 2):
        k = torch.randn(1, 2, n, 4)
        try:
            expected = eager(k)
        except AssertionError as error:
            before = [model.k_cache.clone(), model.cache_pos.clone()]
            with pytest.raises(AssertionError) as raised:
                jitted(k)
            assert raised.value.args == error.args == ()
            note = raised.value.__notes__[0]
            assert re.search(r"test_tensor_asserts\.py:\d+: `assert \(self.cache_pos\[0\] \+ seq_len\)", note)
            assert_close(model.k_cache, before[0], rtol=0, atol=0)  # nothing written
            assert_close(model.cache_pos, before[1], rtol=0, atol=0)
        else:
            assert_close(jitted(k), expected)
        assert_close(model.k_cache, eager.k_cache)
        assert_close(model.cache_pos, eager.cache_pos)


def write_then_check(x, limit):
    x.add_(1)  # eager has written this when the assert fails
    assert not (x.max() > limit), "x past its limit"
    x.mul_(2)
    return x


@pytest.mark.parametrize("limit", [5.0, 0.5])
def test_an_assert_lands_the_writes_before_it_and_keeps_its_message(limit, executor_set):
    x, x_eager = torch.zeros(3), torch.zeros(3)
    try:
        expected, error = write_then_check(x_eager, torch.tensor(limit)), None
    except AssertionError as e:
        expected, error = None, e
    jitted = thunder_ext.jit(write_then_check)
    if error is None:
        assert_close(jitted(x, torch.tensor(limit)), expected)
    else:
        with pytest.raises(AssertionError) as raised:
            jitted(x, torch.tensor(limit))
        assert raised.value.args == error.args == ("x past its limit",)
    assert_close(x, x_eager)  # written once before the failing assert, as eager writes it


def checked_gather(k, pos):
    assert pos.max() < k.shape[0], "position past the cache"
    return k.index_select(0, pos)


def test_an_op_the_assert_guards_fails_at_the_assert_however_scheduled(executor_set):
    # no write orders the gather: the check's result does, so even run as early as dataflow allows, the gather
    # of a position past the end raises the assert's error, not its own
    k = torch.randn(4, 2)
    assert_close(thunder_ext.jit(checked_gather, transforms=[HoistIndexing()])(k, torch.tensor([3])), k[3:])
    with pytest.raises(AssertionError) as raised:
        thunder_ext.jit(checked_gather, transforms=[HoistIndexing()])(k, torch.tensor([4]))
    assert raised.value.args == ("position past the cache",)


def branch_on_a_tensor(x):
    if x.sum() > 0:
        x.add_(1)
    return x


@pytest.mark.executor_sets("defaults")  # fails while tracing
def test_a_branch_on_a_tensor_names_the_line_and_thunderfx_and_stock_thunder_is_unchanged():
    x = torch.ones(3)
    with pytest.raises(
        NotImplementedError,
        match=r"a branch on a tensor's value at .*test_tensor_asserts\.py:\d+: `if x.sum\(\) > 0:`.*thunder_ext.thunderfx",
    ):
        thunder_ext.jit(branch_on_a_tensor)(x)
    with pytest.raises(NotImplementedError, match=r"^casting a TensorProxy to a Python boolean is not supported"):
        thunder.jit(write_then_check)(x, torch.tensor(5.0))
    assert_close(x, torch.ones(3))
