"""Differentiated writes through views of intermediates, and through a diagonal of an argument: the gradient and the
arguments eager gives (``transforms/view_writes.py``).

Each program runs under eager PyTorch and under ``thunder_ext.jit`` (under each executor set) on equal inputs;
outputs, every argument after the call, and the gradient of every argument that requires grad (of a random
weighting of the outputs) are compared. Each refusal is checked with its message, raised before anything runs.
"""

from __future__ import annotations

import copy

import pytest
import thunder
import torch
from torch.testing import assert_close

import thunder_ext
from helpers import assert_matches_eager, clone_args, functionalized_trace, writes_in
from test_entry_points import ENTRY_POINTS


def assert_gradients_match_eager(fn, *args, compile=thunder_ext.jit):
    """Outputs, arguments after the call and gradients match eager's; returns the compiled function."""
    eager_args, ext_args = clone_args(args), clone_args(args)
    for e, j, a in zip(eager_args, ext_args, args):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            e.requires_grad_(True), j.requires_grad_(True)
    compiled = compile(fn)
    expected, actual = fn(*eager_args), compiled(*ext_args)
    expected, actual = (
        (expected,) if torch.is_tensor(expected) else expected,
        (actual,) if torch.is_tensor(actual) else actual,
    )
    assert_close(actual, expected)
    weights = [torch.randn_like(e) for e in expected]
    sum(((e * w).sum() for e, w in zip(expected, weights))).backward()
    sum(((a * w).sum() for a, w in zip(actual, weights))).backward()
    for i, (j, e, a) in enumerate(zip(ext_args, eager_args, args)):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            assert_close(j.grad, e.grad, msg=lambda m: f"gradient of argument {i} differs from eager's: {m}")
        elif isinstance(a, torch.Tensor):  # eager's may require grad now, written with a value that does
            assert_close(j.detach(), e.detach(), msg=lambda m: f"argument {i} differs after the call: {m}")
    return compiled


def slice_mul(a, y):
    x = a * 2
    x[0:1].mul_(y)
    return x


def strided_view_of_a_flat_view(a, y):
    x = a.clone()
    x.view(-1)[::2].mul_(2)
    return x * y


def select_relu(a):
    x = a * 1.5 - 1
    x[1].relu_()
    return x


def narrow_clamp(a):
    x = a + 0
    x.narrow(1, 1, 2).clamp_(-0.5, 0.5)
    return x


def transposed_row_mul(a, y):
    x = a * 2
    x.t()[0].mul_(y)
    return x


def diagonal_mul(a, y):
    x = a * 2
    x.diagonal().mul_(y)
    return x


def unsqueezed_slice_fill(a):
    x = a.clone()
    x[0:2].unsqueeze(0).fill_(2.0)
    return x * a


def permuted_masked_fill(a, m):
    x = a * 2
    x.permute(2, 0, 1)[0].masked_fill_(m, 0.0)
    return x


def view_read_before_and_after(a, y):
    x = a * 2
    v = x[0:2]
    before = v * 3
    v.mul_(y)
    return before + v, x


def copy_from_a_function_of_itself(a, y):
    x = a * 2
    x[1:].copy_(x[:-1] + y)
    return x


def reshaped_slice_mul(a, y):
    x = a * 2
    x.reshape(-1)[1:4].mul_(y)
    return x


def view_then_base_then_view(a, y):
    x = a * 2
    v = x[1:]
    v.mul_(y)
    x.add_(1)
    v.mul_(x[:1].clone())
    return v * 2, x


def chain_of_writes_through_one_view(a, y):
    x = a * 2
    v = x[0]
    v.mul_(y)
    v.add_(a[1])
    v.clamp_(-0.5, 0.5)
    return x


def squeeze_of_a_selected_column(a, y):
    x = a * 2
    x[:, 1:2].squeeze(1).mul_(y)
    return x.sum(0)


def movedim_narrow_chain(a, y):
    x = a * 2 + 1
    x.movedim(0, 2).narrow(0, 1, 2)[:, 0].mul_(y)
    return x


def view_made_before_a_write_of_the_base(a, y):
    x = a * 2
    v = x[0:2]
    x.mul_(y)
    return v * 1


def expanded_read_after_the_write(a, y):
    x = a * 2
    e = x.expand(3, *x.shape)
    x[0:1].mul_(y)
    return e * 1


def into_a_base_that_needs_no_grad(y):
    x = torch.zeros(4, 2)
    x[1:3].t().copy_(y * 2)
    return x * 3


def additive_slice_write(a, y):
    x = a * 2
    x[:, :2] += y
    return x


def setitem_of_a_row(a, y):
    x = a * 2
    x[0] = y[0] * 3
    return x


def one_element_diagonal_mul(a):
    x = a * 1.5
    x.diagonal().mul_(3.0)  # torch 2.9.1's Inductor lost the take's gradient of a one-element base
    return x


def diagonal_of_an_argument_filled(buf, a):
    buf.diagonal().fill_(-2.0)  # thunder's autodiff makes diagonal a copy, which its write filled
    return a * -0.5


def differentiated_value_into_a_diagonal_of_an_argument_read_after(buf, y):
    d = buf.diagonal()
    before = d * 1
    d.copy_(y * 2)
    return buf @ y + before


def argument_read_through_a_view_taken_before_the_write(buf, a):
    v = buf.unsqueeze(1)
    # thunder renamed v past the write: a's gradient missed v
    buf.index_copy_(0, torch.tensor([2, 0], device=buf.device), a * 2)
    return v * 3


def argument_read_after_a_write_through_its_view(buf, a):
    buf[1:3].mul_(a)
    return buf * buf.sum(0, keepdim=True)


def argument_read_through_another_view_after_a_write(buf, a):
    v, w = buf.unsqueeze(1), buf[1:]
    v.mul_(a.unsqueeze(1))
    return w * 3


def argument_read_through_its_diagonal_taken_before_a_write(buf, a):
    d = buf.diagonal()
    buf.add_(-2.0)  # thunder's autodiff makes the diagonal a copy: it read buf's old diagonal
    return d.unsqueeze(0) * a


def argument_computed_from_after_a_write_through_its_view(buf, a):
    buf.t().add_(a)
    buf.mul_(3.0)  # computes from buf past the write through its view: thunder renamed buf, a's gradient missed it
    return buf * 1.0


def argument_masked_after_a_write_through_its_view(buf, a, mask):
    buf.t().add_(a)
    buf.masked_fill_(mask, -2.0)  # requires_grad/found_ec7d9da96264: silently wrong, or thunder's AssertionError
    return buf * 1.0


def argument_written_with_a_value_that_needs_no_grad_after_a_differentiated_one(buf, a):
    buf.copy_(a * 2)
    buf[0:2].fill_(1.0)  # eager's gradient of buf's read is zero there
    return buf * a


PROGRAMS = [
    (slice_mul, lambda: [torch.tensor([1.0, 2.0, 3.0]), torch.tensor(3.0)], (True, True)),
    (strided_view_of_a_flat_view, lambda: [torch.randn(2, 3), torch.randn(2, 3)], (True, True)),
    (select_relu, lambda: [torch.randn(3, 4)], (True,)),
    (narrow_clamp, lambda: [torch.randn(3, 4)], (True,)),
    (transposed_row_mul, lambda: [torch.randn(3, 4), torch.randn(3)], (True, True)),
    (diagonal_mul, lambda: [torch.randn(3, 3), torch.randn(3)], (True, True)),
    (unsqueezed_slice_fill, lambda: [torch.randn(4, 2)], (True,)),
    (permuted_masked_fill, lambda: [torch.randn(2, 3, 4), torch.rand(2, 3) > 0.5], (True, False)),
    (view_read_before_and_after, lambda: [torch.randn(4), torch.randn(2)], (True, True)),
    (copy_from_a_function_of_itself, lambda: [torch.randn(5), torch.randn(4)], (True, True)),
    (reshaped_slice_mul, lambda: [torch.randn(2, 3), torch.randn(3)], (True, False)),
    (view_then_base_then_view, lambda: [torch.randn(4), torch.randn(3)], (True, True)),
    (chain_of_writes_through_one_view, lambda: [torch.randn(3, 2), torch.randn(2)], (True, True)),
    (squeeze_of_a_selected_column, lambda: [torch.randn(3, 3), torch.randn(3)], (False, True)),
    (movedim_narrow_chain, lambda: [torch.randn(2, 3, 4), torch.randn(2)], (True, True)),
    (view_made_before_a_write_of_the_base, lambda: [torch.randn(3), torch.randn(3)], (True, True)),
    (expanded_read_after_the_write, lambda: [torch.randn(3), torch.randn(1)], (True, True)),
    (into_a_base_that_needs_no_grad, lambda: [torch.randn(2, 2)], (True,)),
    (additive_slice_write, lambda: [torch.randn(3, 4), torch.randn(3, 2)], (True, True)),
    (setitem_of_a_row, lambda: [torch.randn(3, 4), torch.randn(2, 4)], (True, True)),
    (one_element_diagonal_mul, lambda: [torch.randn(1, 1)], (True,)),
    # through a diagonal of an argument that requires no grad: scattered, written back
    (diagonal_of_an_argument_filled, lambda: [torch.randn(1, 4, 2), torch.randn(1, 4, 2)], (False, True)),
    (
        differentiated_value_into_a_diagonal_of_an_argument_read_after,
        lambda: [torch.randn(3, 3), torch.randn(3)],
        (False, True),
    ),
    # into an argument that requires no grad, read after the write through another of its tensors: scattered too
    (argument_read_through_a_view_taken_before_the_write, lambda: [torch.randn(3), torch.randn(2)], (False, True)),
    (argument_read_after_a_write_through_its_view, lambda: [torch.randn(4), torch.randn(2)], (False, True)),
    (argument_read_through_another_view_after_a_write, lambda: [torch.randn(3), torch.randn(3)], (False, True)),
    (
        argument_read_through_its_diagonal_taken_before_a_write,
        lambda: [torch.randn(3, 3), torch.randn(3)],
        (False, True),
    ),
    (
        argument_written_with_a_value_that_needs_no_grad_after_a_differentiated_one,
        lambda: [torch.randn(3), torch.randn(3)],
        (False, True),
    ),
    (argument_computed_from_after_a_write_through_its_view, lambda: [torch.randn(2, 3), torch.randn(2)], (False, True)),
    (
        argument_masked_after_a_write_through_its_view,
        lambda: [torch.randn(2, 3), torch.randn(2), torch.rand(2, 3) > 0.5],
        (False, True, False),
    ),
]


@pytest.mark.parametrize("fn, make_args, requires_grad", PROGRAMS, ids=[p[0].__name__ for p in PROGRAMS])
def test_a_differentiated_write_through_a_view_gets_eagers_gradient(fn, make_args, requires_grad):
    torch.manual_seed(0)
    args = [a.requires_grad_(True) if flag else a for a, flag in zip(make_args(), requires_grad)]
    assert_gradients_match_eager(fn, *args)


def diagonal_divided_by_a_computed_0d(a, y):
    x = a + 1
    x.diagonal().div_(y[0].abs() + 1)
    return x * 2


def row_times_a_sum(a, y):
    x = a * 1.5
    x[0].mul_(y.sum())
    return x


def times_an_element(a, y):  # no write: thunder 0.2.6's own rules, a 0-d value broadcast
    return a * y[1] - y.sum() / a.exp()


def plus_its_own_sum(a, y):  # stock thunder: a's gradient 3 + 1 where eager's is 3 + 9
    return a * 3 + a.sum() + y.sum()


def less_its_own_mean(a, y):  # stock thunder fails: "the number of sizes provided (1) must be greater or equal..."
    return a - a.mean() * y[0]


@pytest.mark.parametrize(
    "fn", [diagonal_divided_by_a_computed_0d, row_times_a_sum, times_an_element, plus_its_own_sum, less_its_own_mean]
)
def test_a_0d_value_the_function_computes_gets_its_gradient_summed_where_it_broadcasts(fn):
    # stock thunder 0.2.6 puts the broadcast gradient unreduced: expand(torch.FloatTensor{[1, 3]}, size=[1])
    torch.manual_seed(0)
    assert_gradients_match_eager(fn, torch.randn(3, 3, requires_grad=True), torch.randn(2, requires_grad=True))


def test_the_issues_example_gives_eagers_numbers():
    # docs/design.md recorded a.grad [2, 2, 2] and y.grad 0 before the rewrite; eager's are these
    a, y = torch.tensor([1.0, 2.0, 3.0], requires_grad=True), torch.tensor(3.0, requires_grad=True)
    out = thunder_ext.jit(slice_mul)(a, y)
    out.sum().backward()
    assert_close(out, torch.tensor([6.0, 4.0, 6.0]))
    assert_close(a.grad, torch.tensor([6.0, 2.0, 2.0]))
    assert_close(y.grad, torch.tensor(2.0))


def test_the_write_becomes_a_scatter_into_all_of_its_base_before_autodiff_run_in_place():
    # the slice's new value is index_copied into the flattened base, in place: a write of the whole base, which
    # thunder differentiates right and the checker decides as any other
    jfn = assert_gradients_match_eager(slice_mul, torch.randn(3, requires_grad=True), torch.randn((), requires_grad=True))
    trace = functionalized_trace(jfn)
    assert not any(b.sym.name == "mul_" for b in trace.bound_symbols)
    (write,) = writes_in(trace)
    producer = next(b for b in trace.bound_symbols if write.args[0].name in {o.name for o in b.flat_proxy_outs})
    assert producer.sym.name == "scatter_into_view" and write.kwargs["out"].shape == (3,)
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.how != "copy", decision


def test_the_scattered_values_gradient_is_the_view_of_its_bases_gradient_not_a_gather():
    # as PyTorch's *_scatter ops: Inductor cannot compile a take at the written positions beside a view's pad
    # (requires_grad/found_c2d12a70ea4a); the view's own ops, transpose and select, take the new value's gradient
    def write_a_transposed_row(a):
        r = a * -2.0
        r.transpose(0, 1).select(1, 0).mul_(-2.0)
        return r

    jfn = assert_gradients_match_eager(write_a_transposed_row, torch.randn(2, 4, 4, requires_grad=True))
    backward = thunder.last_backward_traces(jfn)[-1]
    ops = {s.sym.name for b in backward.bound_symbols for s in [b, *b.subsymbols]}
    assert {"transpose", "select"} <= ops and not ops & {"take", "index_select"}, backward


def test_a_trace_without_such_a_write_is_left_as_it_was():
    def write_a_whole_intermediate(a, y):
        x = a * 2
        x.mul_(y)
        return x

    jfn = thunder_ext.jit(write_a_whole_intermediate)
    jfn(torch.randn(3, requires_grad=True), torch.randn(3))
    assert not any("scatter writes through views" in str(t.get_provenance()) for t in thunder.last_traces(jfn))


def filled_through_a_chain_with_a_diagonal(a, b):
    r = a * 2.0
    with torch.no_grad():  # not differentiated, beside b * 3.0, which may be
        r.diagonal().unsqueeze(0).diagonal().fill_(-2.0)
    return r, b * 3.0


@pytest.mark.parametrize("differentiated", [False, True], ids=["without grad", "in a differentiated trace"])
def test_a_write_through_a_chain_with_a_diagonal_is_scattered_only_under_thunders_torch_compile_executor(
    differentiated, executor_set
):
    # torch.compile may return such a view of its region's intermediate apart from it (tests/test_torch_compile_regions.py);
    # elsewhere the write is left as traced, where nvFuser got a program scattered so wrong (docs/gpu.md, runs 9, 10)
    check = assert_gradients_match_eager if differentiated else assert_matches_eager
    jfn = check(filled_through_a_chain_with_a_diagonal, torch.randn(3, 3), torch.randn(2, requires_grad=differentiated))
    scattered = any(b.sym.name == "view_positions" for b in thunder.last_traces(jfn)[-1].bound_symbols)
    assert scattered == (executor_set == "torch_compile"), thunder.last_traces(jfn)[-1]


def written_then_read_through_views_made_after(buf, a):
    buf.index_copy_(0, torch.tensor([2, 0], device=buf.device), a * 2)
    return buf.unsqueeze(0)[:, 1:] * 3


def written_through_a_view_then_read_through_it(buf, a):
    v = buf[1:3]
    v.mul_(a)
    return v * 3


@pytest.mark.parametrize(
    "fn", [written_then_read_through_views_made_after, written_through_a_view_then_read_through_it]
)
def test_an_argument_read_only_through_what_its_write_wrote_is_written_in_place(fn):
    """thunder's own form derives these reads from the write, so its storage is not scattered and the write stays in
    place (a KV cache written in a forward with grad, its written tensor read after)."""
    jfn = assert_gradients_match_eager(fn, torch.randn(4), torch.randn(2, requires_grad=True))
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.how != "copy", decision


def test_a_narrow_is_differentiated_as_the_slice_it_is():
    # thunder's own narrow is differentiated by torch's autograd (narrow_vjp), which Dynamo cannot always trace
    def narrowed(a):
        return a.narrow(1, -3, 2) * 3

    jfn = assert_gradients_match_eager(narrowed, torch.randn(2, 4, requires_grad=True))
    traces = [thunder.last_traces(jfn)[-1], thunder.last_backward_traces(jfn)[-1]]
    assert not any("narrow" in b.sym.name for t in traces for b in t.bound_symbols)


def test_a_scattered_argument_last_written_into_itself_is_written_back_in_place():
    # design.md's Limits: the write-back of the final value is the checker's, in place where the last write was
    # into the argument itself, a copy of the whole argument where it was through a view
    for fn, how in [
        (argument_read_through_a_view_taken_before_the_write, "in place at the producer"),
        (argument_read_after_a_write_through_its_view, "copy"),
    ]:
        jfn = assert_gradients_match_eager(fn, torch.randn(4), torch.randn(2, requires_grad=True))
        assert [d.how for d in thunder_ext.inplace_decisions(jfn)] == [how], fn.__name__


def test_without_grad_a_write_through_a_view_stays_an_in_place_write():
    jfn = thunder_ext.jit(slice_mul)
    with torch.no_grad():
        jfn(torch.randn(3, requires_grad=True), torch.randn(()))
    assert not any("scatter writes through views" in str(t.get_provenance()) for t in thunder.last_traces(jfn))


def through_as_strided(a):
    x = a * 2
    x.as_strided((2,), (2,)).mul_(3)
    return x


def through_an_expanded_view(a):
    x = a * 2
    x.unsqueeze(0).expand(2, 3).mul_(3)
    return x


def through_a_split(a):
    x = a * 2
    x.split(2)[1].mul_(3)
    return x


def through_detach(a):
    x = a * 2
    x.detach()[0:1].mul_(3)
    return x


def through_a_view_beside_a_write_under_no_grad(a, y):
    x = a * 2
    x[1:2].mul_(y)
    with torch.no_grad():
        x[0:1].mul_(3)
    return x


@pytest.mark.parametrize(
    "fn, message",
    [
        (through_as_strided, (r"`mul_` writes through the view chain `as_strided\(\)` at .*test_view_write_gradients.py:\d+: "
                              r"x.as_strided\(\(2,\), \(2,\)\).mul_\(3\) .*`as_strided`: its strides address the storage")),
        (through_an_expanded_view, r"chain `unsqueeze\(\).expand\(\)` .*`expand` makes elements share memory"),
        (through_a_split, r"chain `split\(\)` .*`split` returns several views, and eager refuses a write into one"),
        (through_detach, r"chain `detach\(\).getitem\(\)` .*`detach`: eager's graph ignores a write through it"),
        (through_a_view_beside_a_write_under_no_grad,
         r"`mul_` writes through the view chain `getitem\(\)` at .*x\[0:1\].mul_\(3\) .*it runs under no_grad into storage"),
    ],
    ids=["as_strided", "expand", "split", "detach", "no_grad-beside"],
)  # fmt: skip
def test_a_write_whose_gradient_cannot_be_exact_is_refused_before_anything_runs(fn, message):
    args = [torch.randn(3, requires_grad=True), torch.randn(1, requires_grad=True)][: fn.__code__.co_argcount]
    with pytest.raises(thunder_ext.ViewWriteGradientError, match=message):
        thunder_ext.jit(fn)(*args)
    assert all(a.grad is None for a in args)


class ScaledHalves(torch.nn.Module):
    """A block that scales part of its activation in place, relus another part, and masks a slice of its scores."""

    def __init__(self):
        super().__init__()
        self.inp, self.out = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)
        self.scale = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        h = self.inp(x)
        h[:, 4:].mul_(2.0)
        h[:, :4].relu_()  # last: eager's relu_ keeps its result for the backward
        scores = h @ h.t() * self.scale
        scores.diagonal().masked_fill_(scores.diagonal() < 0, 0.0)
        return self.out(scores @ h)


@pytest.mark.parametrize("entry", ["jit", "plugin-thunder.jit", "backend"])
def test_a_training_step_through_views_matches_eager_for_three_steps(entry):
    check_training_steps(ENTRY_POINTS[entry])


def check_training_steps(compile, device: str = "cpu") -> None:
    """Three Adam steps of ``ScaledHalves`` on ``device``, compiled by ``compile``: outputs, gradients, parameters
    and optimizer state equal eager's (tests/test_gpu.py runs it on CUDA)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = ScaledHalves().to(device)
    twin = copy.deepcopy(eager)
    compiled = compile(twin)
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (eager, twin)]
    for _ in range(3):
        x = torch.randn(5, 6, device=device)
        want, got = eager(x), compiled(x)
        assert_close(got, want)
        for y, optimizer in zip((want, got), optimizers):
            optimizer.zero_grad()
            y.square().sum().backward()
            optimizer.step()
        for (name, pe), (_, pj) in zip(eager.named_parameters(), twin.named_parameters()):
            assert_close(pj.grad, pe.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"gradient of {name}: {m}")
            assert_close(pj, pe, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name} after the step: {m}")
    for pe, pj in zip(eager.parameters(), twin.parameters()):
        state_e, state_j = optimizers[0].state[pe], optimizers[1].state[pj]
        assert_close(state_j["exp_avg"], state_e["exp_avg"], rtol=1e-4, atol=1e-6)
        assert_close(state_j["exp_avg_sq"], state_e["exp_avg_sq"], rtol=1e-4, atol=1e-8)
