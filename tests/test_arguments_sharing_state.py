"""An argument that shares storage with a tensor the function reaches some other way (``m(m.w)``): the second rule of
``transforms/aliased_arguments.py``. Where either is written, the call is refused before anything runs, at each
entry point that traces a module whole; a copy of the same tensor, or a call that writes neither, computes eager's
values. Under each executor set (``executor_set``)."""

from __future__ import annotations

import copy

import pytest
import thunder
import torch
from torch.testing import assert_close

import thunder_ext


class WritesItsArgument(torch.nn.Module):
    """``x.mul_(2); return self.w.sum(0) + self.b``: eager, called as ``m(m.w)``, sums ``w`` after the write."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([[1.0, 2, 3, 4], [3, 4, 5, 6]]))
        self.register_buffer("b", torch.arange(4.0))

    def forward(self, x):
        x.mul_(2)
        return self.w.sum(0) + self.b


class WritesItsBuffer(torch.nn.Module):
    """``self.b.add_(1); return x * 2``: eager, called as ``m(m.b)``, doubles ``b`` after the write."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.arange(4.0))

    def forward(self, x):
        self.b.add_(1)
        return x * 2


ENTRY_POINTS = {
    "jit": thunder_ext.jit,
    "plugin": lambda m: thunder.compile(m, recipe=thunder_ext.DefaultExecutorsRecipe(), plugins="inplace"),
}
SHARED = {  # a module, and the argument that shares its storage, made from the module
    "parameter": (WritesItsArgument, lambda m: m.w),
    "view-of-parameter": (WritesItsArgument, lambda m: m.w[1]),
    "buffer": (WritesItsArgument, lambda m: m.b),
    "written-buffer": (WritesItsBuffer, lambda m: m.b),
    "view-of-written-buffer": (WritesItsBuffer, lambda m: m.b[1:3]),
}


@torch.no_grad()
@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("shared", SHARED)
def test_an_argument_sharing_written_module_state_is_refused_before_anything_runs(shared, entry):
    make, argument = SHARED[shared]
    torch.manual_seed(0)
    m = make()
    before = copy.deepcopy(m.state_dict())
    compiled = ENTRY_POINTS[entry](m)
    with pytest.raises(thunder_ext.AliasedArgumentsError, match=r"shares storage with a tensor the function takes "
                       r"from elsewhere .*, and `(mul_|add_)` writes into `\w+` \(.*test_arguments_sharing_state\.py"):
        compiled(argument(m))
    for name, value in m.state_dict().items():
        assert torch.equal(value, before[name]), f"{name} was written by a refused call"


@torch.no_grad()
@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("shared", SHARED)
def test_a_copy_of_the_same_state_computes_eagers_values_with_the_same_program(shared, entry):
    make, argument = SHARED[shared]
    torch.manual_seed(0)
    m, expected_m = make(), make()
    compiled = ENTRY_POINTS[entry](m)
    for _ in range(2):  # the second call runs the compiled program the first made
        x, expected_x = argument(m).clone(), argument(expected_m).clone()
        assert_close(compiled(x), expected_m(expected_x))
        assert_close(x, expected_x)
        for (name, value), expected in zip(m.state_dict().items(), expected_m.state_dict().values()):
            assert_close(value, expected, msg=lambda msg: f"{name}: {msg}")
    assert thunder.cache_misses(compiled) == 1


@torch.no_grad()
def test_state_that_nothing_writes_may_be_passed_as_an_argument():
    class ReadsBoth(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.arange(4.0))
            self.register_buffer("seen", torch.zeros(4))

        def forward(self, x):
            self.seen.add_(1)  # a write, of storage the argument does not share
            return x * self.w

    m = ReadsBoth()
    compiled = thunder_ext.jit(m)
    assert_close(compiled(m.w), m.w * m.w)
    assert_close(m.seen, torch.ones(4))


class WritesARowOfItsPages(torch.nn.Module):
    """Two buffers, one a row of the other: ``self.page.add_(x.mean(0))`` between two sums of ``self.pages``, the
    first before the write, the second after it (the third rule of ``transforms/aliased_arguments.py``)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("pages", torch.arange(8.0).reshape(2, 4))
        self.register_buffer("page", self.pages[1])

    def forward(self, x):
        before = x + self.pages.sum(0)
        self.page.add_(x.mean(0))
        return before * self.pages.sum(0)


@torch.no_grad()
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_two_buffers_sharing_storage_where_one_is_written_are_refused_before_anything_runs(entry):
    m = WritesARowOfItsPages()
    before = copy.deepcopy(m.state_dict())
    compiled = ENTRY_POINTS[entry](m)
    with pytest.raises(thunder_ext.AliasedArgumentsError, match=r"`t_page` and `t_pages`, two tensors the function "
                       r"takes from a module .* share storage, and `add_` writes into `t_page` \(.*test_arguments_"):
        compiled(torch.ones(2, 4))
    for name, value in m.state_dict().items():
        assert torch.equal(value, before[name]), f"{name} was written by a refused call"
    # apart, the same program computes eager's values: the check reads the buffers at each call
    m.register_buffer("page", m.pages[1].clone())
    expected_m = copy.deepcopy(m)
    for _ in range(2):
        assert_close(compiled(torch.ones(2, 4)), expected_m(torch.ones(2, 4)))
        for (name, value), expected in zip(m.state_dict().items(), expected_m.state_dict().values()):
            assert_close(value, expected, msg=lambda msg: f"{name}: {msg}")
