"""Buffer reuse (transforms/reuse_buffers.py): each rule where it applies, and where it must not."""

import pytest
import thunder
import torch
from thunder.core.proxies import variableify
from thunder.core.trace import from_trace

from helpers import assert_matches_eager
from thunder_ext.executors.torch_inplace import INTO_OPS
from thunder_ext.transforms.reuse_buffers import reuse_dead_buffers

# A pass over the PyTorch executor's ops: in a torch.compile region, Inductor plans the buffers.
pytestmark = pytest.mark.executor_sets("defaults")


def reused_in(trace) -> list[str]:
    """The ops of ``trace`` that run into another tensor's buffer without being a write."""
    return [b.sym.name.removesuffix("_into") for b in trace.bound_symbols if b.sym in INTO_OPS.values()]


def reused(jfn) -> list[str]:
    return reused_in(thunder.last_traces(jfn)[-1])


def adam_like(p, g, v):
    v.mul_(0.9).addcmul_(g, g, value=0.1)
    denom = (v.sqrt() / 3).add_(1e-8)
    p.addcdiv_(g, denom, value=-0.1)


def test_adam_chain_runs_in_its_buffers_and_matches_eager():
    jfn = assert_matches_eager(adam_like, torch.randn(64), torch.randn(64), torch.rand(64))
    # mul runs in v (rule 2: its only reader writes v); the division in sqrt's dead result (rule 1)
    assert sorted(reused(jfn)) == ["mul", "true_divide"]


@pytest.mark.parametrize(
    "f",
    [
        lambda x, y: (t := x.sqrt(), u := t / 3, y.add_(1), t, u)[-2:],  # t is returned
        lambda x, y: (t := x.sqrt(), u := t / 3, w := t * 2, y.add_(1), u, w)[-2:],  # t read after
    ],
    ids=["dead-argument-returned", "dead-argument-read-later"],
)
def test_a_live_argument_keeps_its_buffer(f):
    jfn = assert_matches_eager(f, torch.rand(8), torch.randn(8))
    assert "true_divide" not in reused(jfn)


@pytest.mark.parametrize(
    "view",
    [lambda a: a.narrow(0, 0, 2), lambda a: a.swapaxes(0, 0), lambda a: torch.linalg.diagonal(a.unsqueeze(0))],
    ids=["narrow", "swapaxes", "linalg.diagonal"],
)
def test_a_view_of_an_argument_is_never_a_dead_buffer(view):
    # Ops thunder registers from torch (narrow, swapaxes) run as torch executor ops with no subsymbol:
    # the executor's implementation map is what names them views. Its `diagonal` operator implements
    # torch.linalg.diagonal, which thunder does not list as a view, and torch.diagonal, which it does.
    def f(a, b):
        b.add_(1)
        return view(a) * 2

    jfn = assert_matches_eager(f, torch.randn(3), torch.randn(3))
    assert reused(jfn) == []


def test_the_next_write_target_is_not_used_when_the_op_reads_another_view_of_it():
    def f(m):
        m.copy_(m.t() * 2 + 1)  # element (i, j) needs (j, i): computing in m would overwrite it first

    jfn = assert_matches_eager(f, torch.randn(4, 4))
    # thunder renames m between the mul and the write, which alone keeps the mul out of m; drop that
    # rename so that only the rule's view check stands between the mul and a wrong out=m
    trace = thunder.last_traces(jfn)[-1]
    body = [b for b in trace.bound_symbols if b.sym.name != "python_del"]
    (mul,) = [k for k, b in enumerate(body) if b.sym.name == "mul"]
    rename = body[mul + 1]
    assert rename.sym.name == "update_aliases"
    swap = {variableify(after): before for before, after in zip(rename.args[0], rename.output)}
    unrenamed = from_trace(trace)
    unrenamed.bound_symbols = body[: mul + 1] + [b.from_bsym_swap_proxies(swap) for b in body[mul + 2 :]]
    assert "mul" not in reused_in(reuse_dead_buffers(unrenamed))


def test_the_next_write_target_is_not_used_when_its_old_value_is_read_before_the_write():
    def f(v, g):
        y = v * 2
        old = v.sum()  # reads v between the producer and the write
        v.copy_(y + g)
        return old

    assert_matches_eager(f, torch.randn(6), torch.randn(6))
