"""The lists, tuples and dicts among a call's arguments (``transforms/argument_containers.py``): a compiled program
runs only for a call that holds the same, nested, with the same lengths and keys in order; any other call compiles,
and computes eager's values. Under each executor set, at the jit and the plugin."""

from __future__ import annotations

import pytest
import thunder
import torch
from torch.testing import assert_close

import thunder_ext


def sgd_step(ps, gs):
    for p, g in zip(ps, gs):
        p.add_(g, alpha=-0.1)


def concatenated(d):
    return torch.cat(list(d.values()))


def nested(pairs):
    total = 0
    for a, b in pairs:
        total = total + a * b
    return total


class ListModule(torch.nn.Module):
    """A module whose call takes a list: the plugin's entry point compiles modules."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, xs):
        for x in xs:
            self.seen.add_(x)
        return self.seen * 1


def tensors(n: int) -> list[torch.Tensor]:
    return [torch.full((3,), float(i + 1)) for i in range(n)]


def test_a_longer_list_compiles_and_updates_every_tensor():
    step = thunder_ext.jit(sgd_step)
    for n in (2, 4, 2):
        ps, want = tensors(n), tensors(n)
        step(ps, tensors(n))
        sgd_step(want, tensors(n))
        assert_close(ps, want)
    assert thunder.cache_misses(step) == 2 and thunder.cache_hits(step) == 1  # the third call reuses the first's


def test_a_dict_of_other_keys_or_another_order_compiles():
    jitted = thunder_ext.jit(concatenated)
    a, b, c = tensors(3)
    for d in ({"a": a, "b": b}, {"b": b, "a": a}, {"a": a, "c": c}, {"a": a, "b": b}):
        assert_close(jitted(d), concatenated(d))
    assert thunder.cache_misses(jitted) == 3


def test_nested_tuples_of_another_length_compile():
    jitted = thunder_ext.jit(nested)
    a, b, c, d = tensors(4)
    for pairs in ([(a, b)], [(a, b), (c, d)], [(d, c), (b, a)]):
        assert_close(jitted(pairs), nested(pairs))
    assert thunder.cache_misses(jitted) == 2  # the third holds what the second did


@pytest.mark.parametrize("entry", ["jit", "plugin"])
def test_a_module_called_with_a_longer_list_compiles(entry):
    m, want = ListModule(), ListModule()
    compiled = (thunder_ext.jit(m) if entry == "jit"
                else thunder.compile(m, recipe=thunder_ext.DefaultExecutorsRecipe(), plugins="inplace"))  # fmt: skip
    for n in (1, 3):
        assert_close(compiled(tensors(n)), want(tensors(n)))
        assert_close(m.seen, want.seen)
    assert thunder.cache_misses(compiled) == 2


def test_arguments_without_containers_get_no_check():
    jitted = thunder_ext.jit(lambda x, y: x.add_(y))
    jitted(torch.zeros(3), torch.ones(3))
    prologue = thunder.last_prologue_traces(jitted)[-1]
    assert not any(b.sym.name == "check_argument_containers" for b in prologue.bound_symbols)
