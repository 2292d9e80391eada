"""torch.optim's SGD (momentum), Adam and AdamW stepped by ``thunder_ext.jit(optimizer.step)`` (and, with
``foreach=True``, by ``torch.compile(optimizer.step, backend=thunder_ext.ThunderCompiler())``) over a model's
``nn.Parameter``s, against the same optimizer stepped eagerly on a twin of the model."""

import copy

import pytest
import thunder
import thunder.dynamo
import torch
from torch.testing import assert_close

import thunder_ext

OPTIMIZERS = {
    "sgd-momentum": (lambda params, foreach: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach), ["momentum_buffer"]),
    "adam": (lambda params, foreach: torch.optim.Adam(params, lr=0.01, foreach=foreach), ["step", "exp_avg", "exp_avg_sq"]),
    "adamw": (lambda params, foreach: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, foreach=foreach), ["step", "exp_avg", "exp_avg_sq"]),
}  # fmt: skip


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))


def backward(m: torch.nn.Module, x: torch.Tensor) -> None:
    m.zero_grad()
    m(x).square().sum().backward()


def stepped_as_eager(name: str, foreach: bool, compile_step, steps: int = 3) -> tuple[object, list]:
    """``compile_step(opt.step)`` and the same optimizer stepped eagerly on a twin of the model, ``steps`` times:
    the parameters and every state tensor match after each step, and the parameters keep their storage.
    Returns the compiled step and the parameters."""
    make, state_names = OPTIMIZERS[name]
    compiled_model, eager_model = model(), model()
    opt, eager_opt = make(compiled_model.parameters(), foreach), make(eager_model.parameters(), foreach)
    step = compile_step(opt.step)
    pointers = [p.data_ptr() for p in compiled_model.parameters()]
    for i in range(steps):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(i))
        backward(compiled_model, x)
        backward(eager_model, x)
        step()
        eager_opt.step()
        params, eager_params = list(compiled_model.parameters()), list(eager_model.parameters())
        assert_close(params, eager_params)
        for p, e in zip(params, eager_params):
            for s in state_names:
                assert_close(opt.state[p][s], eager_opt.state[e][s], msg=lambda m: f"state {s}: {m}")
    assert [p.data_ptr() for p in compiled_model.parameters()] == pointers
    return step, list(compiled_model.parameters())


def writes_per_step(name: str, params: list) -> int:
    """Every parameter and every state tensor the update writes (SGD's momentum and parameter, Adam's step,
    both moments and parameter)."""
    return len(params) * (len(OPTIMIZERS[name][1]) + 1)


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_optimizer_step_writes_every_parameter_and_state_tensor_in_place(name, foreach):
    step, params = stepped_as_eager(name, foreach, thunder_ext.jit)
    assert all(p.requires_grad for p in params)
    decisions = thunder_ext.inplace_decisions(step)
    assert [d.how for d in decisions if d.how == "copy"] == [], decisions
    assert len(decisions) == writes_per_step(name, params)
    assert "copy_to_out_" in str(thunder.last_traces(step)[-1])


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_the_backend_takes_a_foreach_step_into_thunder_with_every_write_in_place(name):
    # Dynamo's graph of a foreach=True step calls the ``torch._foreach_*`` ops, which thunder.dynamo's splitter
    # sent to Inductor before adapt_thunder entered them in thunder's function map
    torch._dynamo.reset()  # Dynamo's cache is per code object: the step of each optimizer class
    backend = thunder_ext.ThunderCompiler()
    # SGD makes its momentum buffers in the first step and Dynamo recompiles the second
    step, params = stepped_as_eager(name, True, lambda step: torch.compile(step, backend=backend))
    split = [r.info for info in backend.subgraph_infos for r in info.split_reasons if "_foreach" in r.info]
    assert split == []
    decisions = thunder_ext.inplace_decisions(step)
    assert [d for d in decisions if d.how == "copy" or "torch._foreach_" not in d.source] == [], decisions
    assert len(decisions) == writes_per_step(name, params)


@pytest.mark.executor_sets("defaults")
def test_stock_thunders_backend_steps_a_foreach_adam_as_eager_once_adapted():
    # adapting enters the foreach ops in thunder's function map for stock thunder.dynamo too: where they went
    # to Inductor, stock thunder now traces them, and must compute what eager does
    torch._dynamo.reset()
    thunder_ext.adapt_thunder()
    backend = thunder.dynamo.ThunderCompiler()
    stepped_as_eager("adam", True, lambda step: torch.compile(step, backend=backend), steps=2)
    assert [len(info.thunder_compiled_fns) for info in backend.subgraph_infos] == [1]


def test_the_first_sgd_step_makes_the_momentum_buffers_eagerly_and_the_next_are_jitted():
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    step = thunder_ext.jit(opt.step)
    backward(m, torch.randn(5, 4))
    step()
    assert thunder.compile_stats(step).calls == 0
    step()
    assert thunder.compile_stats(step).calls == 1


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda ps: torch.optim.RMSprop(ps), r"`RMSprop.step` is not supported"),
        (lambda ps: torch.optim.Adam(ps, differentiable=True), r"`Adam.step` with `differentiable=True` is not supported"),
    ],
    ids=["another-optimizer", "an-option"],
)
def test_an_optimizer_it_cannot_step_is_refused_when_jitted(make, message):
    with pytest.raises(TypeError, match=message):
        thunder_ext.jit(make(model().parameters()).step)


def test_a_closure_is_refused_before_anything_is_written():
    m = model()
    opt = torch.optim.Adam(m.parameters())
    step = thunder_ext.jit(opt.step)
    backward(m, torch.randn(5, 4))
    before = copy.deepcopy(list(m.parameters()))
    with pytest.raises(TypeError, match=r"`Adam.step` with a closure is not supported"):
        step(lambda: m(torch.randn(5, 4)).sum())
    assert_close(list(m.parameters()), before)
    assert not opt.state
