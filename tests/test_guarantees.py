"""Each guarantee of the functionalization pass and the checker, with an adversary that tries to break it."""

import pytest
import torch
import thunder

import thunder_ext
from thunder_ext.transforms import InplaceOrderingError, InplaceTransform
from thunder_ext.transforms.aliasing import Aliases
from thunder_ext.transforms.op_kinds import is_copy_to_out
from helpers import (
    HoistReads,
    HoistWrites,
    LatestFirst,
    SinkReads,
    assert_matches_eager,
    functionalized_trace,
    hoist_writes,
    writes_in,
)


# The adversaries reschedule the top-level ops that the PyTorch executor runs one by one; inside a torch.compile
# region the order is the fusion pass's, checked by the ordering rule there (tests/test_torch_compile_regions.py).
@pytest.mark.executor_sets("defaults")
def test_reader_between_producer_and_write_keeps_the_write_a_copy():
    def f(x, idx, src):
        old = x.sum()
        x.index_copy_(0, idx, src)
        return old, x * 2

    jfn = assert_matches_eager(f, torch.randn(5, 2), torch.tensor([1]), torch.randn(1, 2), transforms=[SinkReads()])
    final = [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols]
    assert final.index("index_copy") < final.index("sum"), "the adversary must put the read after the producer"
    (decision,) = thunder_ext.inplace_decisions(jfn)
    assert decision.how == "copy" and "`sum` uses" in decision.reason


def read_then_overwrite(x, y):
    c = y * 2  # `computed` exists before the old x is read
    old = x.sum()
    x.copy_(c)
    return old, x * 1


@pytest.mark.executor_sets("defaults")
def test_readers_of_old_value_stay_before_write_under_adversarial_scheduling():
    jfn = assert_matches_eager(read_then_overwrite, torch.randn(4), torch.randn(4), transforms=[HoistWrites()])
    final = thunder.last_traces(jfn)[-1]
    names = [b.sym.name for b in final.bound_symbols]
    assert names.index("sum") < min(i for i, b in enumerate(final.bound_symbols) if "copy_to_out" in b.sym.name)


def set_read_then_fill(w, x):
    x[0] = -2.0  # reads the old x
    r = x.sum()
    x.fill_(3.0)  # full_like of the setitem's result: its shape alone
    return w.sum(), r


@pytest.mark.executor_sets("defaults")
def test_a_reader_whose_result_the_write_takes_for_its_shape_alone_stays_before_it():
    # requires_grad/found_e15b965a9837: with an argument that requires grad, thunder traces the fill's full_like as
    # a full of constants, which reads nothing of the setitem: only the write's `after` keeps the setitem above it
    w = torch.randn(3, requires_grad=True)
    jfn = assert_matches_eager(set_read_then_fill, w, torch.randn(3), transforms=[SinkReads()])
    traced = functionalized_trace(jfn)
    (write,) = writes_in(traced)
    (setitem,) = [b for b in traced.bound_symbols if b.sym.name == "setitem"]
    assert [p.name for p in write.kwargs["after"]] == [setitem.output.name]


class UnorderedInplace(InplaceTransform):
    """The pass without its ordering edges, then the adversarial scheduler: the guarantee broken on purpose."""

    def transform_traces_pre_prologue(self, pro, comp, epi, **kwargs):
        pro, comp, epi = super().transform_traces_pre_prologue(pro, comp, epi, **kwargs)
        comp.bound_symbols = [
            b.from_bsym(kwargs={**b.kwargs, "after": ()}) if is_copy_to_out(b) else b for b in comp.bound_symbols
        ]
        return pro, comp, epi

    def transform_trace_post_optimization(self, trace, **kwargs):
        return super().transform_trace_post_optimization(hoist_writes(trace), **kwargs)


def test_checker_refuses_a_write_moved_above_a_reader_of_the_old_value():
    jfn = thunder.jit(read_then_overwrite, executors=[thunder_ext.inplace_ex, "torch"], transforms=[UnorderedInplace()])
    x = torch.randn(4)
    before = x.clone()
    with pytest.raises(InplaceOrderingError, match=r"reads .* after .*copy_to_out_"):
        jfn(x, torch.randn(4))
    torch.testing.assert_close(x, before)  # refused at compile time: nothing was written


def test_readers_of_new_value_depend_on_the_write_through_other_aliases():
    def f(k, pos, new):
        k[:1].index_copy_(2, pos, new)  # written through a view...
        return k.sum()  # ...read through the base

    jfn = assert_matches_eager(f, torch.randn(2, 2, 4, 3), torch.tensor([1]), torch.randn(1, 2, 1, 3), transforms=[HoistWrites()])
    trace = functionalized_trace(jfn)
    (write,) = writes_in(trace)
    consumers = [b for b in trace.bound_symbols if write.output.name in {p.name for p in b.flat_proxy_args}]
    assert consumers and consumers[0].sym.name == "update_aliases"


def test_readers_of_new_value_depend_on_the_write_through_an_alias_named_before_it():
    # thunder renames v only before an in-place op on v itself, so after x.mul_ nothing but program
    # order put v's readers after the write.
    def f(x, y):
        v = x.view(-1)
        x.mul_(3)
        y.copy_(v)
        return v.sum()

    assert_matches_eager(f, torch.randn(2), torch.randn(2), transforms=[HoistReads()])


def test_one_write_per_tensor_for_a_chain_of_many_ops(executor_set):
    def f(x, y):
        x.add_(y)
        x.mul_(2)
        x.sub_(1)
        x.clamp_(-1, 1)
        return x

    jfn = assert_matches_eager(f, torch.randn(8), torch.randn(8))
    (write,) = writes_in(functionalized_trace(jfn))
    in_place = {"defaults": "in place at the write", "torch_compile": "in a torch.compile region"}[executor_set]
    assert [d.how for d in thunder_ext.inplace_decisions(jfn)] == [in_place]


def test_copy_from_an_input_is_written_before_that_input_changes():
    # x.copy_(y) computes y itself; deferring the write past y.add_ would give x the new y.
    def f(x, y):
        x.copy_(y)
        y.add_(1)
        return x * 1

    jfn = assert_matches_eager(f, torch.randn(3), torch.randn(3))
    assert len(writes_in(functionalized_trace(jfn))) == 2


def test_copy_source_keeps_its_value_when_the_target_is_written_again():
    # x takes r's value, not its identity: writing x again leaves r, and readers of r, alone.
    def f(x):
        r = x.clone()
        x.copy_(r)
        x.add_(-0.5)
        return r, r * 2, r[:1].sum()

    assert_matches_eager(f, torch.randn(3))


def test_copy_source_written_later_lands_the_copy_first():
    def f(x):
        r = x.clone()
        x.copy_(r)
        r.add_(1.5)
        x.mul_(2)
        return r

    jfn = assert_matches_eager(f, torch.randn(3), transforms=[HoistWrites()])
    copy, *later = writes_in(functionalized_trace(jfn))
    assert copy.args[0].name == "r"
    assert any(copy.output.name in {p.name for p in w.kwargs["after"]} for w in later)  # the write of r


def test_copy_from_an_intermediate_chains_into_one_write():
    def f(x, y):
        x.copy_(y * 2)
        x.add_(1)
        return x

    jfn = assert_matches_eager(f, torch.randn(3), torch.randn(3))
    assert len(writes_in(functionalized_trace(jfn))) == 1


def test_a_returned_alias_of_a_written_intermediate_reads_the_write(executor_set):
    # r is returned under the name it had before the write through its view. Named so, the write's result
    # would have no reader, and thunder's rematerialization cannot handle the fusion region that runs it.
    def f(x, y):
        r = x * -2.0
        r.unsqueeze(0).add_(y)
        return r

    jfn = assert_matches_eager(f, torch.randn(2, 2), torch.randn(()))
    trace = functionalized_trace(jfn)
    (write,) = writes_in(trace)
    (returned,) = trace.bound_symbols[-1].args[0]["output"]
    (renamed,) = [b for b in trace.bound_symbols if returned.name in {o.name for o in b.flat_proxy_outs}]
    assert renamed.sym.name == "update_aliases" and write.output.name in {p.name for p in renamed.flat_proxy_args}


@pytest.mark.parametrize("copy_source_still_read", [False, True])
def test_a_write_nothing_observes_is_dropped(executor_set, copy_source_still_read):
    def f(x, y):
        r = x * 2
        if copy_source_still_read:
            r.copy_(y)  # lands at once if both storages are named later: only y's is
        else:
            r.add_(y)
        return y * 3

    jfn = assert_matches_eager(f, torch.randn(3), torch.randn(3))
    assert writes_in(functionalized_trace(jfn)) == []


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_write_landed_for_a_view_whose_shape_alone_is_read_is_dropped(executor_set, requires_grad):
    # the view lands the write (rule 1), and zeros_like reads its shape only: nothing reads the written data; kept in
    # a differentiated trace, such a write had no reader and thunder's split put it into the backward
    # (requires_grad/found_1d1b4a33fc2e)
    def f(x):
        r = x * 2
        r.mul_(3)
        v = r.view(-1)
        return torch.zeros_like(v) + x

    jfn = assert_matches_eager(f, torch.randn(3, requires_grad=requires_grad))
    assert writes_in(functionalized_trace(jfn)) == []


def test_copy_to_out_meta_rejects_mismatches_naming_both_tensors():
    from thunder_ext.primitive import CopyToOutError

    def f(a, b):
        return thunder_ext.copy_to_out_(a, out=b)

    for a, b, what in [
        (torch.zeros(3), torch.zeros(4), "shape"),
        (torch.zeros(3), torch.zeros(3, dtype=torch.float64), "dtype"),
    ]:
        before = b.clone()
        with pytest.raises(CopyToOutError, match=rf"copy_to_out_: cannot write `\w+` into `\w+`: {what}"):
            thunder_ext.jit(f)(a, b)
        torch.testing.assert_close(b, before)


def test_copy_to_out_called_directly_writes():
    def f(a, b):
        thunder_ext.copy_to_out_(a * 2, out=b)
        return b + 1

    a, b = torch.randn(3), torch.zeros(3)
    out = thunder_ext.jit(f)(a, b)
    torch.testing.assert_close(b, a * 2)
    torch.testing.assert_close(out, a * 2 + 1)


def divide_then_write(x, n, d):
    y = x + 1.0  # the value to write is ready before the division: only the ordering edge keeps the write after it
    q = n // d  # integer division: eager raises on a zero divisor, before x is written
    x.copy_(y)
    return q


def add_then_write(x, n, d):
    y = x + 1.0
    q = n + d  # integer addition cannot fail
    x.copy_(y)
    return q


# Under thunder's torch.compile executor an integer division by zero kills the process (SIGFPE in Inductor's
# kernel, stock thunder too: docs/design.md, Limits), so this runs under the defaults only.
@pytest.mark.executor_sets("defaults")
def test_a_write_waits_for_an_integer_division_that_may_fail_under_adversarial_scheduling():
    x = torch.zeros(3)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        thunder_ext.jit(divide_then_write, transforms=[HoistWrites()])(x, torch.tensor([4]), torch.tensor([0]))
    assert torch.equal(x, torch.zeros(3))
    assert_matches_eager(divide_then_write, torch.zeros(3), torch.tensor([4]), torch.tensor([3]), transforms=[HoistWrites()])


def test_a_write_need_not_wait_for_integer_arithmetic_that_cannot_fail():
    args = torch.zeros(3), torch.tensor([4]), torch.tensor([0])
    (divided,) = writes_in(functionalized_trace(assert_matches_eager(divide_then_write, *args[:2], torch.tensor([3]))))
    (added,) = writes_in(functionalized_trace(assert_matches_eager(add_then_write, *args)))
    assert len(divided.kwargs["after"]) == 1 and added.kwargs["after"] == ()


def write_then_failing_read(x, k, pos):
    x.add_(1.0)
    return k.index_select(0, pos)


def chain_around_a_failing_read(x, k, pos):
    x.add_(1.0)
    got = k.index_select(0, pos)
    x.mul_(2.0)
    return got


def failing_call(fn, x):
    with pytest.raises((IndexError, RuntimeError), match="out of range|out of bounds"):
        fn(x, torch.zeros(4, 2), torch.tensor([9]))
    return x


@pytest.mark.parametrize("fn", [write_then_failing_read, chain_around_a_failing_read])
@pytest.mark.parametrize("transforms", [[], [HoistReads()]], ids=["as scheduled", "reads hoisted"])
def test_a_failure_finds_the_writes_before_it_made(fn, transforms, executor_set):
    # eager has written x when the gather fails: the write lands before the gather, which depends on it
    # (under the adversary, which runs every read as early as dataflow allows)
    args = torch.zeros(3), torch.randn(4, 2), torch.tensor([1])
    jfn = assert_matches_eager(fn, *args, transforms=transforms)
    assert torch.equal(failing_call(jfn, torch.zeros(3)), failing_call(fn, torch.zeros(3)))


def test_a_chain_on_an_argument_around_an_op_that_may_fail_writes_it_before_and_after():
    args = torch.zeros(3), torch.randn(4, 2), torch.tensor([1])
    trace = functionalized_trace(assert_matches_eager(chain_around_a_failing_read, *args))
    first, second = writes_in(trace)
    aliases = Aliases(trace.bound_symbols)
    assert all(aliases.same_tensor(w.kwargs["out"], trace.args[0]) for w in (first, second))
    # without an op that may fail between them, the chain is one write (test_one_write_per_tensor_...)
    (write,) = writes_in(functionalized_trace(assert_matches_eager(lambda x: x.add_(1.0).mul_(2.0), torch.zeros(3))))


def writes_at_one_position_twice(k, v, pos, new):
    k.index_copy_(0, pos, new)
    v.index_copy_(0, pos, new * 2)
    return v.sum()


def index_copy_indices(trace) -> list[str]:
    return [b.args[2].name for b in trace.bound_symbols if b.sym.name == "index_copy"]


def test_an_op_at_the_index_and_bound_an_earlier_op_of_its_kind_took_waits_for_no_write_between():
    # V's write at K's position fails only where K's failed first: it need not follow K's write (a decode step)
    args = torch.zeros(4, 2), torch.zeros(4, 2), torch.tensor([1]), torch.ones(1, 2)
    first, second = index_copy_indices(functionalized_trace(assert_matches_eager(writes_at_one_position_twice, *args)))
    assert first == second
    # another bound: V's may fail where K's did not, and follows K's write by its index renamed with it
    args = torch.zeros(8, 2), *args[1:]
    first, second = index_copy_indices(functionalized_trace(assert_matches_eager(writes_at_one_position_twice, *args)))
    assert first != second


@pytest.mark.parametrize("size_k, bad", [(4, 9), (8, 5)], ids=["both fail", "the second fails"])
@pytest.mark.parametrize(
    "transforms", [[], [HoistReads()], [LatestFirst()]], ids=["as scheduled", "reads hoisted", "latest first"]
)
def test_a_failure_at_an_index_an_earlier_op_took_finds_what_eager_finds(size_k, bad, transforms, executor_set):
    def call(fn):
        k, v = torch.zeros(size_k, 2), torch.zeros(4, 2)
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds"):
            fn(k, v, torch.tensor([bad]), torch.ones(1, 2))
        return k, v

    args = torch.zeros(size_k, 2), torch.zeros(4, 2), torch.tensor([1]), torch.ones(1, 2)
    jfn = assert_matches_eager(writes_at_one_position_twice, *args, transforms=transforms)
    for got, expected in zip(call(jfn), call(writes_at_one_position_twice)):
        assert torch.equal(got, expected)


def test_a_write_into_an_intermediate_does_not_land_for_a_failure():
    # the caller never sees `t` if the gather fails: its write waits for the return, as any other
    def f(x, k, pos):
        t = x * 1
        t.add_(1.0)
        got = k.index_select(0, pos)
        return t, got

    jfn = assert_matches_eager(f, torch.zeros(3), torch.randn(4, 2), torch.tensor([1]))
    ops = functionalized_trace(jfn).bound_symbols
    assert [b.sym.name for b in ops].index("index_select") < ops.index(writes_in(functionalized_trace(jfn))[0])
