"""Every way in gives the same in-place writes: ``thunder_ext.jit``, ``thunder.compile(..., plugins="inplace")``
under either interpreter, ``thunder_ext.thunderfx``, and ``torch.compile(..., backend=thunder_ext.ThunderCompiler())``.

Each runs under each executor set (the plugin's recipe, ``thunder_ext.DefaultExecutorsRecipe``, uses thunder's default executors, which the
``executor_set`` fixture sets), against eager PyTorch on equal inputs: outputs, every argument, buffers,
gradients, and every write in place. A torch.compile entry point that fell back to eager would run no
thunder subgraph, so each test also requires decisions from one.
"""

from __future__ import annotations

import copy
import inspect
import re

import pytest
import thunder
import torch
from torch.testing import assert_close

import thunder_ext
from helpers import assert_matches_eager, clone_args


def plugin(interpreter: str):
    def compile(fn, strict=False):
        recipe = thunder_ext.DefaultExecutorsRecipe(interpreter=interpreter)
        return thunder.compile(fn, recipe=recipe, plugins=[thunder_ext.Inplace(strict=strict)])

    return compile


ENTRY_POINTS = {
    "jit": thunder_ext.jit,
    "plugin-thunder.jit": plugin("thunder.jit"),
    "plugin-thunder.fx": plugin("thunder.fx"),
    "thunderfx": thunder_ext.thunderfx,
    "backend": lambda fn, strict=False: torch.compile(fn, backend=thunder_ext.ThunderCompiler(strict=strict)),
}


@pytest.fixture(params=ENTRY_POINTS)
def compile(request):
    torch._dynamo.reset()  # Dynamo's cache is per code object; a fresh one for each test
    return ENTRY_POINTS[request.param]


def kv_write(k, v, pos, new_k, new_v):
    k.index_copy_(2, pos, new_k)
    v.index_copy_(2, pos, new_v)
    return k.sum(-1) + v.sum(-1)


def read_before_and_after(x, y):
    old = x * 2
    x.add_(y)
    return old, x * 3


def chain_through_a_view(x):
    x[1:].mul_(2)
    x.add_(1)
    return x.sum()


def optimizer_step(p, m, g):
    m.lerp_(g, 0.1)
    p.add_(m, alpha=-1e-3)


def kv_args():
    return [torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4), torch.tensor([5]), torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4)]


def in_place(compiled, writes: int, named_in=None) -> None:
    """The last call's decisions are ``writes`` writes, all in place, each naming a line of ``named_in``'s
    source that calls an in-place op, as ``file:line: code``."""
    decisions = thunder_ext.inplace_decisions(compiled)
    assert len(decisions) == writes and all(d.how != "copy" for d in decisions), decisions
    if named_in is not None:
        assert {d.source for d in decisions} <= inplace_lines(named_in), decisions


def inplace_lines(fn) -> set[str]:
    lines, first = inspect.getsourcelines(fn)
    return {f"{__file__}:{first + i}: {line.strip()}" for i, line in enumerate(lines) if re.search(r"\.\w+_\(", line)}


@pytest.mark.parametrize(
    "fn, make_args, writes",
    [
        (kv_write, kv_args, 2),
        (read_before_and_after, lambda: [torch.randn(6), torch.randn(6)], 1),
        (chain_through_a_view, lambda: [torch.randn(5, 3)], 2),
        # the parameter requires grad; the step runs under no_grad, as torch.optim's does
        (optimizer_step, lambda: [torch.randn(8).requires_grad_(), torch.zeros(8), torch.randn(8)], 2),
    ],
    ids=["kv-write", "read-before-and-after-a-write", "chain-of-writes-through-a-view", "optimizer-step"],
)
def test_every_entry_point_matches_eager_with_every_write_in_place_named_by_the_users_line(
    compile, fn, make_args, writes
):
    args = make_args()
    with torch.no_grad():
        compiled = assert_matches_eager(fn, *args, jit=compile)
    in_place(compiled, writes, named_in=fn)


def write_across_a_graph_break(k, v, pos, new):
    k.index_copy_(2, pos, new)
    if k.shape[2] > 8:
        torch._dynamo.graph_break()  # a second Dynamo frame: the rest of the function, resumed
    v.index_copy_(2, pos, new * 2)
    return v.sum(-1)


@pytest.mark.executor_sets("defaults")  # which Dynamo graphs ran is the same under every executor set
@pytest.mark.parametrize("entry", ["plugin-thunder.fx", "thunderfx", "backend"])
def test_decisions_describe_the_last_call_whatever_dynamo_recompiled(entry):
    torch._dynamo.reset()
    compiled = ENTRY_POINTS[entry](write_across_a_graph_break)
    # 1: two frames, a graph each; 2: a graph of the first frame alone, and the second frame's graph of call 1
    # not run; 3: call 1's graphs again, not the newer one that Dynamo compiled for call 2
    for dtype, length in ((torch.float32, 16), (torch.float64, 8), (torch.float32, 16)):
        args = [torch.zeros(1, 2, length, 4, dtype=dtype), torch.zeros(1, 2, length, 4, dtype=dtype), torch.tensor([5])]
        args.append(torch.randn(1, 2, 1, 4, dtype=dtype))
        with torch.no_grad():
            assert_matches_eager(write_across_a_graph_break, *args, jit=lambda fn: compiled)
        in_place(compiled, 2, named_in=write_across_a_graph_break)
        decisions = thunder_ext.inplace_decisions(compiled)
        assert [d.nbytes for d in decisions] == [args[0].nbytes] * 2, decisions
        assert "k.index_copy_" in decisions[0].source and "v.index_copy_" in decisions[1].source, decisions


def test_a_position_out_of_range_raises_eagers_error_with_the_caches_as_they_were(compile):
    # under the torch.compile executor the writes stay in the region, after a check of the position
    args = kv_args()
    with torch.no_grad():
        compiled = assert_matches_eager(kv_write, *args, jit=compile)
        k, v = args[0].clone(), args[1].clone()
        with pytest.raises(IndexError, match="index 8 is out of bounds for dimension 2 with size 8"):
            compiled(k, v, torch.tensor([8]), *args[3:])
    assert torch.equal(k, args[0]) and torch.equal(v, args[1])


class Decoder(torch.nn.Module):
    """A KV cache as buffers, next to parameters that require grad, as a model is constructed."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("k", torch.zeros(1, 2, 8, 4))
        self.register_buffer("v", torch.zeros(1, 2, 8, 4))

    def forward(self, pos, token):
        new = self.proj(token)
        self.k.index_copy_(2, pos, new)
        self.v.index_copy_(2, pos, new * 2)
        return (self.k * self.v).sum((-1, -2))


def test_a_module_decodes_with_its_cache_written_in_place(compile):
    torch.manual_seed(0)
    eager = Decoder()
    twin = copy.deepcopy(eager)
    compiled = compile(twin)
    storage = twin.k.data_ptr()
    with torch.inference_mode():
        for step in range(3):
            pos, token = torch.tensor([step]), torch.randn(1, 2, 1, 4)
            assert_close(compiled(pos, token), eager(pos, token))
            assert_close(twin.k, eager.k)
            assert_close(twin.v, eager.v)
    assert twin.k.data_ptr() == storage
    in_place(compiled, 2, named_in=Decoder.forward)


def test_a_training_step_matches_eager_with_its_buffer_writes_in_place(compile):
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).train()
    twin = copy.deepcopy(eager)
    compiled = compile(twin)
    for _ in range(2):
        x = torch.randn(8, 4)
        want, got = eager(x), compiled(x)
        assert_close(got, want)
        want.square().sum().backward()
        got.square().sum().backward()
        for (name, pe), (_, pj) in zip(eager.named_parameters(), twin.named_parameters()):
            assert_close(pj.grad, pe.grad, rtol=1e-4, atol=1e-4, msg=lambda m: f"gradient of {name}: {m}")
        for (name, be), (_, bj) in zip(eager.named_buffers(), twin.named_buffers()):
            assert_close(bj, be, msg=lambda m: f"buffer {name}: {m}")
    in_place(compiled, 3)  # running_mean, running_var, num_batches_tracked


def write_first_then_read(a, b):
    a.add_(1)
    return b * 2


def test_aliased_arguments_thunder_cannot_represent_are_refused_before_anything_is_written(compile):
    x = torch.randn(3, 3)
    before = x.clone()
    with pytest.raises(thunder_ext.AliasedArgumentsError, match=r"share storage as different views"):
        compile(write_first_then_read)(x, x.t())
    assert_close(x, before)


def overlapping_source(x, idx):
    x.copy_(torch.index_copy(x, 0, idx, x[:1]))
    return x * 1


@pytest.mark.executor_sets("defaults")  # the PyTorch executor's overlap rule; Inductor runs the write itself
def test_strict_raises_for_a_write_it_cannot_prove(compile):
    x = torch.randn(4, 2)
    before = x.clone()
    with pytest.raises(thunder_ext.UnprovenInplaceError, match=r"copy_to_out_\(.*out=.*shares storage"):
        compile(overlapping_source, strict=True)(x, torch.tensor([3]))
    assert_close(x, before)


def test_inplace_decisions_refuses_what_no_thunder_backend_compiled():
    compiled = torch.compile(kv_write, backend="eager")
    compiled(*kv_args())
    with pytest.raises(TypeError, match=r"neither compiled by thunder .* nor by torch.compile with a thunder backend"):
        thunder_ext.inplace_decisions(compiled)


def test_the_plugin_is_registered_by_name():
    compiled = thunder.compile(kv_write, recipe=thunder_ext.DefaultExecutorsRecipe(), plugins="inplace")
    with torch.no_grad():
        args = kv_args()
        expected = kv_write(*clone_args(args))
        assert_close(compiled(*args), expected)
    in_place(compiled, 2)


@pytest.mark.executor_sets("defaults")
@pytest.mark.parametrize("plugins", [["inplace", "reduce-overhead"], ["reduce-overhead", "inplace"]])
def test_the_plugins_transform_runs_before_cuda_graphs_capture_the_trace(plugins):
    from thunder.transforms.cudagraph import CUDAGraphTransform

    compiled = thunder.compile(kv_write, recipe=thunder_ext.DefaultExecutorsRecipe(), plugins=plugins)
    order = [type(t) for t in thunder.compile_data(compiled).transforms]
    assert order.index(thunder_ext.InplaceTransform) < order.index(CUDAGraphTransform), order
