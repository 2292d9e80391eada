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


def test_an_argument_of_the_call_is_never_a_dead_buffer():
    def f(a, b):
        b.add_(1)  # a write: the extension rewrites this trace
        return a * 2  # a dies here, of the result's shape, but it is the caller's tensor

    jfn = assert_matches_eager(f, torch.randn(3), torch.randn(3))
    assert reused(jfn) == []
    # In the pipeline thunder's return still lists every argument, which keeps `a` alive; the final
    # trace returns only the outputs, so there only the rule's own check keeps `a` out
    assert reused_in(reuse_dead_buffers(thunder.last_traces(jfn)[-1])) == []


def test_a_buffer_that_a_live_view_shares_is_not_dead():
    def f(x, y):
        y.add_(1)
        t = x * 2
        v = t[:2]
        u = t + 1  # t's last use, but v, read below, is a view of it
        return u, v * 3

    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4))
    assert "add" not in reused(jfn)


def test_a_dead_buffer_of_another_dtype_is_not_reused():
    def f(x, m, y):
        y.add_(1)
        t = x * 2
        return t + m  # float64: t, float32, dies here but cannot hold the result

    jfn = assert_matches_eager(f, torch.randn(4), torch.randn(4, dtype=torch.float64), torch.randn(4))
    assert "add" not in reused(jfn)


def without_renames(trace):
    """``trace`` without thunder's ``update_aliases``, each renamed tensor named as before: renames stand
    between most producers and writes, so this leaves each rule 2 check alone in the way."""
    swap, body = {}, []
    for b in trace.bound_symbols:
        if b.sym.name == "update_aliases":
            swap.update((variableify(after), swap.get(variableify(before), before)) for before, after in zip(b.args[0], b.output))
        elif b.sym.name != "python_del":
            body.append(b.from_bsym_swap_proxies(swap))
    bare = from_trace(trace)
    bare.bound_symbols = body
    return bare


def reused_without_renames(f, *args) -> list[str]:
    jfn = assert_matches_eager(f, *args)
    return reused_in(reuse_dead_buffers(without_renames(thunder.last_traces(jfn)[-1])))


def test_rule_2_applies_to_a_trace_without_renames():
    # the control for the tests below: on such a trace rule 2 applies unless a check refuses
    assert reused_without_renames(lambda v, g: v.copy_(v * 2 + g), torch.randn(4), torch.randn(4)) == ["mul"]


def test_the_next_write_target_is_not_used_when_the_value_has_another_reader():
    def f(v, g):
        y = v * 2
        v.copy_(y + g)
        return y  # returned after the write: y cannot live in v

    assert "mul" not in reused_without_renames(f, torch.randn(4), torch.randn(4))


def test_the_next_write_target_is_not_used_when_the_write_is_not_elementwise():
    def f(x, z, idx, src):
        # in place, x takes z's rows first, then the source's: the source must not live in x
        x.copy_(torch.index_copy(z, 0, idx, src * 2))

    args = torch.randn(3, 2), torch.randn(3, 2), torch.tensor([2, 0, 1]), torch.randn(3, 2)
    assert "mul" not in reused_without_renames(f, *args)


def test_the_next_write_target_is_not_used_for_a_value_of_another_shape():
    def f(x, s, g):
        x.copy_(s * 2 + g)  # s * 2 broadcasts: x cannot hold it

    assert "mul" not in reused_without_renames(f, torch.randn(4, 3), torch.randn(3), torch.randn(4, 3))


def test_the_next_write_target_is_not_used_when_the_write_also_reads_the_target():
    def f(v):
        v.add_(v * 2)  # add(v, y, out=v) reads v's old value next to y

    assert "mul" not in reused_without_renames(f, torch.randn(4))


def ema_update(buf, x):
    buf.mul_(0.9).add_(x * 0.1)  # both operands of the write's add feed only the write
    return buf * 1


def test_the_next_write_target_holds_one_operand_of_the_write_only():
    # found by BatchNorm's running statistics: both operands were computed into `buf`, the second over the first
    jfn = assert_matches_eager(ema_update, torch.randn(4), torch.randn(4))
    into = [b for b in thunder.last_traces(jfn)[-1].bound_symbols if b.sym in INTO_OPS.values()]
    assert len(into) == 1, into
