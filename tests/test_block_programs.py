"""A replayed block as one call of its program (``block_programs=True``: ``thunder_ext/regional/programs.py``,
``transforms/block_calls.py``).

A model whose replays call a block program must be the same computation as the one whose replays append the block's
ops: the same outputs, cache contents and decisions, eager's gradients. A call stands for the ops only where the
rule of ``transforms/block_calls.py`` allows; each case it refuses is compared with eager, and the log names why.
Growth and new length buckets under ``strict=True``: ``tests/test_block_replay.py``.
"""

from __future__ import annotations

import copy
import logging
import re

import pytest
import thunder
import torch
from torch import nn
from torch.testing import assert_close

import thunder_ext
from helpers import VOCAB, caches, small_llama
from thunder_ext.thunder026 import cache_entries
from thunder_ext.regional.programs import program_called

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")
# the tests read what replay and the block compiler did (records, log lines), which a loaded entry did not do
pytestmark = pytest.mark.fresh_compilations


def calls_of_programs(jitted) -> int:
    return sum(program_called(b) is not None for b in thunder.last_traces(jitted)[-1].bound_symbols)


def summaries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "calls of repeated blocks" in r.getMessage()]


def test_a_block_program_is_the_inlined_model(caplog, executor_set):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    n_layer = 2 if executor_set == "torch_compile" else 3  # CI time: Inductor compiles each program's regions
    torch.manual_seed(0)
    eager = small_llama(n_layer=n_layer)
    eager.set_kv_cache(batch_size=1, max_seq_length=32)
    programmed = thunder_ext.jit(copy.deepcopy(eager), block_programs=True)
    replayed = thunder_ext.jit(copy.deepcopy(eager), block_programs=False)
    x, pos = torch.randint(0, VOCAB, (1, 5)), torch.arange(5)
    with torch.inference_mode():
        for _ in range(3):  # a prefill, then two decode steps: two compilations each
            got, inlined = programmed(x, pos), replayed(x, pos)
            assert_close(got, inlined)
            assert_close(got, eager(x, pos))
            for ours, theirs in zip(caches(programmed._model), caches(replayed._model), strict=True):
                assert_close(ours, theirs)
            assert calls_of_programs(programmed) == n_layer and calls_of_programs(replayed) == 0  # the first too
            ours = sorted((d.how, d.source, d.nbytes) for d in thunder_ext.inplace_decisions(programmed))
            assert ours == sorted((d.how, d.source, d.nbytes) for d in thunder_ext.inplace_decisions(replayed))
            assert len(ours) == 2 * n_layer and all(d[0] != "copy" for d in ours)  # k and v of each layer, in place
            x, pos = got[:, -1:].argmax(-1), pos[-1:] + 1
    called = rf"; compiled Block once \(\d+\.\d s\), called {n_layer} times"
    assert sum(bool(re.search(called, m)) for m in summaries(caplog)) == 2, summaries(caplog)


class Layer(nn.Module):
    """Counts what it saw in a buffer of its own, written in place; ``into_argument``: writes its argument too."""

    def __init__(self, into_argument: bool = False) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("seen", torch.zeros(8))
        self.into_argument = into_argument

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.add_(x.sum(0))
        if self.into_argument:
            x.mul_(0.5)
        return torch.tanh(self.linear(x)) + self.seen


class Stack(nn.Module):
    """``read``: the outer forward reads layer 1's buffer before its call (where a pass may move the read after it)."""


    def __init__(self, read: bool = False, into_argument: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(into_argument) for _ in range(3))
        self.read = read

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        before = self.layers[1].seen * 2 if self.read else 0
        for layer in self.layers:
            y = x * 1
            x = layer(y) + y.sum(0)  # the sum of y as it was before the call, which may write y
        return x + before


def run_both(model: nn.Module, steps: int = 2):
    """``model`` eager and under ``block_programs=True``, called ``steps`` times without grad: compared each time."""
    eager, jitted = model, thunder_ext.jit(copy.deepcopy(model), block_programs=True)
    with torch.no_grad():
        for step in range(steps):
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
            assert_close(jitted(x), eager(x))
            for ours, theirs in zip(jitted._model.buffers(), eager.buffers(), strict=True):
                assert_close(ours, theirs)
    return jitted


def test_a_call_whose_written_buffer_another_op_reads_gets_the_blocks_ops_back(caplog, executor_set):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    jitted = run_both(Stack(read=True))
    assert calls_of_programs(jitted) == 2  # layers 0 and 2; layer 1's call is its ops again
    assert all("compiled Layer once" in m and "called 3 times" in m for m in summaries(caplog)), summaries(caplog)
    torch.manual_seed(0)
    assert calls_of_programs(run_both(Stack())) == 3


def test_by_default_replays_call_programs_unless_the_torch_compile_executor_is_among_the_executors(executor_set):
    # a program would be an Inductor region of its own, each call paying torch.compile's call path (programs_wanted)
    torch.manual_seed(0)
    model = Stack()
    x = torch.randn(4, 8)
    with torch.no_grad():
        want = copy.deepcopy(model)(x)
        jitted = thunder_ext.jit(copy.deepcopy(model))
        assert_close(jitted(x), want)
    assert calls_of_programs(jitted) == (0 if executor_set == "torch_compile" else 3)


class ListArgument(Stack):
    """``Stack`` called with a list of tensors: the call's containers are checked in the model's prologue only."""

    def forward(self, xs: list) -> torch.Tensor:  # type: ignore[override]
        return super().forward(xs[0] + xs[1])


def test_a_model_called_with_a_list_compiles_its_block_programs_without_the_models_containers():
    # a block program's pipeline ran the model's check of its call's list and dict arguments, on a prologue of its
    # own tensors, and failed (KeyError 'args') until the program's compilation was told apart (no_traced_call)
    torch.manual_seed(0)
    eager = ListArgument()
    jitted = thunder_ext.jit(copy.deepcopy(eager), block_programs=True)
    with torch.no_grad():
        for step in range(2):
            xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(step)) for _ in range(2)]
            assert_close(jitted(xs), eager(xs))
        assert calls_of_programs(jitted) == 3
        misses = thunder.cache_misses(jitted)
        longer = [*xs, torch.ones(4, 8)]  # the model's own check of its list's length stays: another compilation
        assert_close(jitted(longer), eager(longer))
        assert thunder.cache_misses(jitted) == misses + 1


def test_a_block_that_writes_its_argument_calls_no_program(caplog, executor_set):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    jitted = run_both(Stack(into_argument=True))
    assert calls_of_programs(jitted) == 0
    why = "3 without a block program: it writes into one of its arguments"
    assert all(why in m for m in summaries(caplog)), summaries(caplog)


def test_with_grad_a_block_that_writes_calls_no_program_and_the_gradients_are_eagers(caplog, executor_set):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    eager = Stack()
    model = copy.deepcopy(eager)
    jitted = thunder_ext.jit(model, block_programs=True)
    x = torch.randn(4, 8)
    eager_loss = eager(x).square().sum()
    eager_loss.backward()
    loss = jitted(x).square().sum()
    loss.backward()
    assert_close(loss, eager_loss)
    for ours, theirs in zip(model.parameters(), eager.parameters(), strict=True):
        assert_close(ours.grad, theirs.grad, atol=1e-4, rtol=1e-4)  # Inductor's fused sums round otherwise
    assert_close(model.layers[2].seen, eager.layers[2].seen)
    assert calls_of_programs(jitted) == 0
    assert all("without a block program: grad is on and it writes a tensor" in m for m in summaries(caplog)), summaries(
        caplog
    )


def calls_of(jitted, half: str, block: str = "Block") -> int:
    """The calls of block programs' forwards or backwards in the last forward or backward trace."""
    trace = (thunder.last_traces if half == "forward" else thunder.last_backward_traces)(jitted)[-1]
    return sum(b.sym.name.startswith(f"block_{block}_{half}_") for b in trace.bound_symbols)


def training_step(model: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    return logits, [p.grad for p in model.parameters()]


def eagers_training_step(jitted: nn.Module, eager: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, list]:
    """A training step of each, ``jitted``'s logits and gradients (None where eager's are) asserted eager's."""
    logits, grads = training_step(jitted, ids)
    expected, expected_grads = training_step(eager, ids)
    assert_close(logits, expected)
    for got, want in zip(grads, expected_grads, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            assert_close(got, want, atol=1e-4, rtol=1e-4)  # Inductor's fused sums round otherwise
    return logits, grads


def test_with_grad_a_block_program_and_its_backward_compute_eagers_training_step(caplog, executor_set):
    """A litgpt model as it loads (parameters that require grad), one training step: each layer one call of its
    block's forward, and one of its backward, under the jit and the plugin; logits and every gradient as eager's
    and as the inlined model's."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    eager = small_llama(n_layer=3).train()
    programmed = thunder_ext.jit(copy.deepcopy(eager), block_programs=True)
    plugged = thunder.compile(copy.deepcopy(eager), recipe=thunder_ext.DefaultExecutorsRecipe(),
                              plugins=[thunder_ext.Inplace(block_programs=True)])  # fmt: skip
    inlined = thunder_ext.jit(copy.deepcopy(eager), block_programs=False)
    ids = torch.randint(0, VOCAB, (2, 12))
    logits, grads = training_step(eager, ids)
    for jitted in (programmed, plugged, inlined):
        ours, our_grads = training_step(jitted, ids)
        assert_close(ours, logits)
        for got, expected in zip(our_grads, grads, strict=True):
            assert_close(got, expected, atol=1e-4, rtol=1e-4)  # Inductor's fused sums round otherwise
    for jitted in (programmed, plugged):
        assert calls_of(jitted, "forward") == 3 and calls_of(jitted, "backward") == 3
    assert calls_of(inlined, "forward") == 0 and calls_of(inlined, "backward") == 0
    once = r"compiled Block once with its backward \(\d+\.\d s\), called 3 times"
    assert sum(bool(re.search(once, m)) for m in summaries(caplog)) == 2, summaries(caplog)  # the jit's, the plugin's


def test_with_grad_a_layer_whose_parameters_are_frozen_shares_no_program_with_the_others(caplog, executor_set):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    eager = small_llama(n_layer=3).train()
    eager.transformer.h[1].requires_grad_(False)  # a frozen layer between two trained ones: no gradient of its own
    model = copy.deepcopy(eager)
    jitted = thunder_ext.jit(model, block_programs=True)
    eagers_training_step(jitted, eager, torch.randint(0, VOCAB, (2, 12)))
    assert calls_of(jitted, "backward") == 3  # the frozen layer's passes its input's gradient on
    called = [re.findall(r"once with its backward \(\d+\.\d s\), called (\d) times?", m) for m in summaries(caplog)]
    assert [sorted(c) for c in called] == [["1", "2"]], summaries(caplog)


def test_with_grad_a_programs_backward_gives_the_gradients_that_flow_and_a_replay_whose_input_carries_one_widens_it(
        caplog, executor_set):  # fmt: skip
    """A frozen embedding (as LoRA trains): the first layer's input carries no gradient, the others' do (through the
    first layer's parameters). The first call's program gives none for it, nor for RoPE's ``cos`` and ``sin``, which
    only select from buffers; the replays call a program of the same ops that gives ``x``'s too. Eager's logits and
    every gradient."""
    from thunder_ext.thunder026.trace_programs import called_program

    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    eager = small_llama(n_layer=3).train()
    eager.transformer.wte.requires_grad_(False)
    jitted = thunder_ext.jit(copy.deepcopy(eager), block_programs=True)
    eagers_training_step(jitted, eager, torch.randint(0, VOCAB, (2, 12)))
    assert calls_of(jitted, "forward") == 3 and calls_of(jitted, "backward") == 3
    called = [re.findall(r"once with its backward \(\d+\.\d s\), called (\d) times?", m) for m in summaries(caplog)]
    assert called == [["1", "2"]], summaries(caplog)
    layer, gradients = [], []
    for b in thunder.last_traces(jitted)[0].bound_symbols:
        if (program := called_program(b)) is not None:
            floating = {i for i, p in enumerate(program.inputs) if thunder.dtypes.is_inexact_dtype(p.dtype)}
            gradients.append([program.inputs[i].shape for i in sorted(floating - program.differentiable)])
            layer.append(sorted(program.differentiable))
    rope = [(1, 12, 8), (1, 12, 8)]  # cos and sin
    assert gradients == [[(2, 12, 64), *rope], rope, rope], gradients  # the first without x's
    assert len(layer[0]) == 7 and layer[1] == layer[2] == [0, *layer[0]]  # the block's 7 parameters, then x too


class _Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, h: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(h)) * gate


class _GateWrittenFirst(nn.Module):
    """A buffer written in place from a parameter's output, then read by every block: a gradient flows into it,
    which its proxy (a buffer's, not requiring grad) does not say."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.register_buffer("gate", torch.zeros(4, 8))
        self.blocks = nn.ModuleList(_Gated() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.gate.copy_(self.pre(x))
        for block in self.blocks:
            x = block(x, self.gate)
        return x


def test_with_grad_a_tensor_written_in_place_from_one_carrying_a_gradient_gets_the_programs_gradient(executor_set):
    torch.manual_seed(0)
    eager = _GateWrittenFirst()
    model = copy.deepcopy(eager)
    jitted = thunder_ext.jit(model, block_programs=True)
    x = torch.randn(4, 8)
    got, want = jitted(x), eager(x)
    assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    assert calls_of(jitted, "backward", "_Gated") == 3
    for ours, theirs in zip(model.parameters(), eager.parameters(), strict=True):  # ``pre``'s through the gate too
        assert_close(ours.grad, theirs.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors
def test_an_hf_decoder_through_the_recipe_and_the_plugin_calls_its_program():
    from test_block_replay import hf_forward, tiny_llama

    from thunder_ext.integrations.hf_transformers import HFTransformersRecipe

    model, ids = tiny_llama(), torch.randint(0, VOCAB, (1, 6))
    plugin = thunder_ext.Inplace(block_programs=True)
    compiled = thunder.compile(copy.deepcopy(model), recipe=HFTransformersRecipe(), plugins=[plugin])
    assert_close(hf_forward(compiled, ids), hf_forward(model, ids))
    assert calls_of_programs(compiled) == 3  # its three decoder layers, the interpreted first one too


def hf_calls(compiled, model, steps: int = 2) -> None:
    """A prefill and decode steps of a tiny HF Llama, ``compiled`` and eager, each with a ``GrowingStaticCache``:
    the same logits and caches, each step's cache writes in place and its three decoder layers one program's calls."""
    from thunder_ext.integrations.hf_transformers import GrowingStaticCache

    def cache():
        return GrowingStaticCache(config=model.config, max_batch_size=1, max_cache_len=32, min_capacity=16)

    ours, theirs = cache(), cache()
    ids, pos = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(0)), torch.arange(6)
    with torch.inference_mode():
        for _ in range(steps):
            mask = (torch.arange(16) <= pos[:, None])[None, None]
            kwargs = dict(attention_mask=mask, cache_position=pos, use_cache=True)
            got = compiled(ids, past_key_values=ours, **kwargs).logits
            assert_close(got, model(ids, past_key_values=theirs, **kwargs).logits)
            for a, b in zip(ours.layers, theirs.layers, strict=True):
                assert_close(a.keys, b.keys)
                assert_close(a.values, b.values)
            assert calls_of_programs(compiled) == 3
            decisions = thunder_ext.inplace_decisions(compiled)
            assert len(decisions) == 6 and all(d.how != "copy" for d in decisions), decisions
            ids, pos = got[:, -1:].argmax(-1), pos[-1:] + 1


def test_hf_decoder_layers_writing_a_growing_cache_call_one_program(caplog, executor_set):
    """Each HF decoder layer reads its ``layer_idx`` only to select its cache layer, so the first is interpreted and
    the others replay it, each selecting its own; all call the first one's program, which writes each layer's cache
    in place (a tensor it reaches through the cache it takes, not its module's)."""
    from test_block_replay import tiny_llama

    caplog.set_level(logging.INFO, logger="thunder_ext")
    model = tiny_llama()
    hf_calls(thunder_ext.jit(copy.deepcopy(model), block_programs=True), model)
    assert all(re.search(r": 1 interpreted \(\d+\.\d s\), 2 replayed \(\d+\.\d s\); compiled LlamaDecoderLayer once "
                         r"\(\d+\.\d s\), called 3 times$", m)
               for m in summaries(caplog)) and len(summaries(caplog)) == 2, summaries(caplog)  # fmt: skip


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors
def test_hf_decoder_layers_writing_a_growing_cache_through_the_recipe_and_the_plugin_call_one_program():
    """By default: the recipe asks the plugin for block programs, which its torch.compile executor (on a CPU) leaves
    off otherwise; a plugin that says ``block_programs=False`` is kept as it says."""
    from test_block_replay import hf_forward, tiny_llama

    from thunder_ext.integrations.hf_transformers import HFTransformersRecipe

    model = tiny_llama()
    hf_calls(thunder.compile(copy.deepcopy(model), recipe=HFTransformersRecipe(), plugins="inplace"), model)
    plugin = thunder_ext.Inplace(block_programs=False)
    compiled = thunder.compile(copy.deepcopy(model), recipe=HFTransformersRecipe(), plugins=[plugin])
    ids = torch.randint(0, VOCAB, (1, 4), generator=torch.Generator().manual_seed(1))
    assert_close(hf_forward(compiled, ids), hf_forward(model, ids))
    assert calls_of_programs(compiled) == 0 and plugin.block_programs is False


class Indexed(nn.Module):
    """A layer that reads its index: where ``changes_ops``, as a factor, so that each layer traces other ops; else
    only to branch, the same way on every layer, so that each layer traces the first one's ops."""

    def __init__(self, index: int, changes_ops: bool) -> None:
        super().__init__()
        self.linear, self.index, self.changes_ops = nn.Linear(8, 8), index, changes_ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.changes_ops:
            x = x * (self.index + 1)
        elif self.index < 0:
            x = -x
        return torch.tanh(self.linear(x))


class IndexedStack(nn.Module):
    def __init__(self, changes_ops: bool, indices: tuple[int, ...] = tuple(range(6))) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Indexed(i, changes_ops) for i in indices)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_layers_of_the_same_ops_share_one_program_beyond_the_records_kept(caplog, monkeypatch, tmp_path, executor_set):
    """Six layers, each interpreted (its index differs and is read), four of them recorded: the first takes the
    model's input, which thunder tags otherwise than a computed tensor, and compiles its program; the five others
    call the second's, the two past the records kept too. Saved to the compile cache, the entry is loaded by a jit of
    its own and computes eager's output."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    model = IndexedStack(changes_ops=False)
    jitted = run_both(copy.deepcopy(model), steps=1)
    assert calls_of_programs(jitted) == 6
    called = [re.findall(r"; (\w+) Indexed once \(\d+\.\d s\), called (\d) times?", m) for m in summaries(caplog)]
    assert called == [[("compiled", "1"), ("compiled", "5")]], summaries(caplog)
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    x = torch.randn(4, 8)
    for loads in (0, 1):
        stored = thunder_ext.jit(copy.deepcopy(model), block_programs=True, compile_cache=True)
        with torch.no_grad():
            assert_close(stored(x), model(x))
        assert thunder_ext.cache_loads(stored) == loads


def test_a_replay_of_a_record_that_shares_another_records_program_calls_it_with_its_own_tensors(executor_set):
    """Layers of indices 0, 1, 2, 2: the third's record calls the second's program, and the fourth replays the third's
    record, so its call gives that program the fourth layer's tensors through the third's."""
    from test_block_replay import hows

    torch.manual_seed(0)
    jitted = run_both(IndexedStack(changes_ops=False, indices=(0, 1, 2, 2)), steps=1)
    assert calls_of_programs(jitted) == 4
    assert hows(jitted) == ["interpreted"] * 3 + ["replayed"]


def test_with_grad_layers_of_the_same_ops_share_one_program_and_its_backward(caplog, executor_set):
    """In training, the six indexed layers' records share programs with their backward: the first layer's input
    requires no grad, so its program gives none for it (eager computes none); the five others share one that does,
    which the first's would not (their parameters' gradients flow through it). Eager's output and every gradient."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    eager = IndexedStack(changes_ops=False)
    model = copy.deepcopy(eager)
    jitted = thunder_ext.jit(model, block_programs=True)
    x = torch.randn(4, 8)
    got, want = jitted(x), eager(x)
    assert_close(got, want)
    got.square().sum().backward()
    want.square().sum().backward()
    for ours, theirs in zip(model.parameters(), eager.parameters(), strict=True):
        assert_close(ours.grad, theirs.grad, atol=1e-4, rtol=1e-4)  # Inductor's fused sums round otherwise
    assert calls_of(jitted, "forward", "Indexed") == 6 and calls_of(jitted, "backward", "Indexed") == 6
    once = r"; compiled Indexed once with its backward \(\d+\.\d s\), called (\d) times?"
    assert [re.findall(once, m) for m in summaries(caplog)] == [["1", "5"]], summaries(caplog)


@pytest.mark.executor_sets("defaults")  # CI time: four programs; which records share one is the executors' concern
def test_layers_whose_read_index_changes_their_ops_share_no_program(caplog):
    """Each layer's ops differ (its index is a constant of them): four records compile a program each, called
    once; the two calls past them are their ops, with eager's result."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    jitted = run_both(IndexedStack(changes_ops=True), steps=1)
    assert calls_of_programs(jitted) == 4
    [summary] = summaries(caplog)
    assert re.findall(r"; (\w+) Indexed once \(\d+\.\d s\), called (\d) times?", summary) == [("compiled", "1")] * 4
    assert summary.endswith("; 2 without a block program: more than 4 records and no program of its ops"), summary


def loaded_without_blocks(cls, f: dict) -> cache_entries.Program:
    """``cache_entries.Program.loaded``, dropping the block programs the entry calls."""
    regions = {name: cls.loaded(r) for name, r in f["regions"].items()}
    return cls(f["function"], f["text"], f["names"], f["code"], {}, regions, f["fullgraph"])


def test_a_compilation_that_calls_a_program_is_saved_with_it_and_loaded_computes_what_a_fresh_one_does(
    caplog, monkeypatch, tmp_path, executor_set
):
    """The compile cache stores each program a compilation calls within its entry; a jit over the same folder loads
    the entry and calls the programs rebuilt from it (under the torch.compile executor, each program's regions
    given to torch.compile again); a deeper model has an entry of its own."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = Stack()

    def run(model: nn.Module = model):
        eager = copy.deepcopy(model)
        jitted = thunder_ext.jit(copy.deepcopy(model), block_programs=True, compile_cache=True)
        with torch.no_grad():
            for step in range(2):
                x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
                assert_close(jitted(x), eager(x))
        for ours, theirs in zip(jitted._model.buffers(), eager.buffers(), strict=True):
            assert_close(ours, theirs)
        return jitted

    assert calls_of_programs(run()) == 3 and thunder_ext.cache_loads(run()) == 1
    assert not [r.getMessage() for r in caplog.records if "not saved to the compile cache" in r.getMessage()]
    deeper = copy.deepcopy(model)
    deeper.layers.append(Layer())
    assert thunder_ext.cache_loads(run(deeper)) == 0  # another entry (its programs loaded: the next test)
    # broken on purpose: an entry loaded without the programs it calls
    monkeypatch.setattr(cache_entries.Program, "loaded", classmethod(loaded_without_blocks))
    with pytest.raises(NameError, match="block_Layer_0"):
        run()


class Residual(nn.Module):
    """Layers that write nothing, each ``x + tanh(linear(x))``."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


class Paired(nn.Module):
    """Layers that return a pair: a tensor and None."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(PairLayer() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x, _ = layer(x)
        return x


class PairLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return x + torch.tanh(self.linear(x)), None


def test_with_grad_a_block_that_returns_a_value_not_a_tensor_calls_no_program_and_the_gradients_are_eagers(
    caplog, executor_set
):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    eager, x = Paired(), torch.randn(4, 8)
    model = copy.deepcopy(eager)
    jitted = thunder_ext.jit(model, block_programs=True)
    jitted(x).square().sum().backward()
    eager(x).square().sum().backward()
    for got, expected in zip(model.parameters(), eager.parameters(), strict=True):
        assert_close(got.grad, expected.grad, atol=1e-4, rtol=1e-4)
    assert calls_of(jitted, "forward", "PairLayer") == 0 and calls_of_programs(jitted) == 0
    why = "3 without a block program: grad is on and it returns a value that is not a tensor"
    assert all(why in m for m in summaries(caplog)), summaries(caplog)


def test_with_grad_a_compilation_is_saved_with_its_programs_backwards_and_loaded_gives_eagers_gradients(
    monkeypatch, tmp_path, executor_set
):
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model, x = Residual(), torch.randn(4, 8)
    eager = copy.deepcopy(model)
    eager(x).square().sum().backward()

    def run():
        ours = copy.deepcopy(model)
        jitted = thunder_ext.jit(ours, block_programs=True, compile_cache=True)
        jitted(x).square().sum().backward()
        for got, expected in zip(ours.parameters(), eager.parameters(), strict=True):
            assert_close(got.grad, expected.grad, atol=1e-4, rtol=1e-4)
        return jitted

    assert thunder_ext.cache_loads(run()) == 0
    loaded = run()
    assert thunder_ext.cache_loads(loaded) == 1
    assert calls_of(loaded, "forward", "Sequential") == 3 and calls_of(loaded, "backward", "Sequential") == 3

    # broken on purpose: an entry loaded without the programs it calls
    monkeypatch.setattr(cache_entries.Program, "loaded", classmethod(loaded_without_blocks))
    with pytest.raises(NameError, match="block_Sequential_forward_0"):
        run()


def test_a_deeper_model_loads_the_block_programs_a_shallower_one_stored_and_computes_what_a_fresh_one_does(
    caplog, monkeypatch, tmp_path, executor_set
):
    """Each block program is stored apart too, keyed by the block's traced ops within the model's compilation
    (``compile_cache/attach.py``, ``_BlockStore``): a deeper model of the same blocks loads it, and computes what a
    fresh compilation does; a block whose ops differ in a constant (another norm eps) compiles its own."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    steps = 1 if executor_set == "torch_compile" else 2  # CI time: Inductor compiles each program's regions

    def run(n_layer: int, compile_cache: bool, **overrides):
        torch.manual_seed(0)
        eager = small_llama(n_layer=n_layer, **overrides)
        eager.set_kv_cache(batch_size=1, max_seq_length=32)
        jitted = thunder_ext.jit(copy.deepcopy(eager), block_programs=True, compile_cache=compile_cache)
        x, pos, outputs, decisions = torch.randint(0, VOCAB, (1, 5)), torch.arange(5), [], []
        caplog.clear()
        with torch.inference_mode():
            for _ in range(steps):  # a prefill, then a decode step: a program each
                outputs.append(jitted(x, pos))
                assert_close(outputs[-1], eager(x, pos))
                for ours, theirs in zip(caches(jitted._model), caches(eager), strict=True):
                    assert_close(ours, theirs)
                decisions += sorted((d.how, d.source, d.nbytes) for d in thunder_ext.inplace_decisions(jitted))
                x, pos = outputs[-1][:, -1:].argmax(-1), pos[-1:] + 1
        assert calls_of_programs(jitted) == n_layer
        return outputs + caches(jitted._model), decisions, " ".join(summaries(caplog))

    run(2, compile_cache=True)
    tensors, decisions, summary = run(3, compile_cache=True)
    assert summary.count("loaded Block once") == steps and "compiled Block" not in summary, summary
    if executor_set == "torch_compile":  # CI time: Inductor compiles each program's regions; the key's rules below
        return
    fresh_tensors, fresh_decisions, fresh_summary = run(3, compile_cache=False)
    assert fresh_summary.count("compiled Block once") == steps
    assert all(torch.equal(a, b) for a, b in zip(tensors, fresh_tensors, strict=True))
    assert decisions == fresh_decisions and len(decisions) == steps * 2 * 3  # k and v of each layer and step
    _, _, summary = run(3, compile_cache=True, norm_eps=1e-3)
    assert summary.count("compiled Block once") == steps and "loaded" not in summary, summary
    # broken on purpose: a key without the ops' float constants, so a block of another eps loads this one's program
    value = cache_entries._value
    monkeypatch.setattr(cache_entries, "_value", lambda x: "a float" if type(x) is float else value(x))
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path / "broken"))  # no model entries to load
    run(2, compile_cache=True)
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        run(3, compile_cache=True, norm_eps=1e-3)
    assert "loaded Block once" in " ".join(summaries(caplog))


def test_with_grad_a_deeper_model_loads_the_block_programs_and_backwards_a_shallower_one_stored(
    caplog, monkeypatch, tmp_path, executor_set
):
    """Under grad each block program is stored apart with its backward (what the forward saves, the gradients the
    backward gives): a deeper litgpt model in training loads them, and its logits and every gradient are eager's and
    a fresh compilation's; a layer whose parameters are frozen (another ``requires_grad``) loads none."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))

    def step(n_layer: int, compile_cache: bool, frozen: int | None = None):
        torch.manual_seed(0)
        eager = small_llama(n_layer=n_layer).train()
        if frozen is not None:
            eager.transformer.h[frozen].requires_grad_(False)
        jitted = thunder_ext.jit(copy.deepcopy(eager), block_programs=True, compile_cache=compile_cache)
        caplog.clear()
        logits, grads = eagers_training_step(jitted, eager, ids)
        assert calls_of(jitted, "forward") == n_layer and calls_of(jitted, "backward") == n_layer
        return [logits, *(g for g in grads if g is not None)], " ".join(summaries(caplog))

    step(2, compile_cache=True)
    tensors, summary = step(3, compile_cache=True)
    assert "loaded Block once with its backward" in summary and "compiled Block" not in summary, summary
    fresh, fresh_summary = step(3, compile_cache=False)
    assert "compiled Block once with its backward" in fresh_summary, fresh_summary
    assert all(torch.equal(a, b) for a, b in zip(tensors, fresh, strict=True))
    # the first layer frozen: the ops of the stored program's (its proxies' names too) but for their requires_grad
    _, summary = step(3, compile_cache=True, frozen=0)
    assert "loaded" not in summary and summary.count("compiled Block once with its backward") == 2, summary


def _first_trace(fn, *args):
    jitted = thunder.jit(fn)
    jitted(*args)
    return thunder.last_traces(jitted)[0]


def _scaled(c):
    return lambda x: x * c  # one line for every constant: the traces differ in the constant only


@pytest.mark.executor_sets("defaults")  # reads thunder's first traces: no executor runs a program
def test_a_block_programs_key_tells_apart_each_constant_and_tensor_metadata_its_ops_take():
    """``cache_entries.trace_digest``, the traced ops in a stored block program's key: equal for the same ops (NaN
    too), apart for a constant of another value or type (0.0 and -0.0; 1, 1.0 and True) and for a tensor of another
    shape, dtype or ``requires_grad``; an op holding a function of its own cannot be keyed."""
    x = torch.randn(3)
    constants = [0.0, -0.0, 1, 1.0, True, float("nan")]
    digests = [cache_entries.trace_digest(_first_trace(_scaled(c), x)) for c in constants]
    assert len(set(digests)) == len(constants)
    assert [cache_entries.trace_digest(_first_trace(_scaled(c), x)) for c in constants] == digests
    others = [torch.randn(4), x.double(), x.clone().requires_grad_()]
    assert not {cache_entries.trace_digest(_first_trace(_scaled(1.0), t)) for t in others} & set(digests)
    executor = thunder.extend.OperatorExecutor("digest_test")
    op = executor.register_operator("digest_test_op", meta=lambda t: thunder.TensorProxy(like=t), fn=lambda t: t * 2)
    with pytest.raises(cache_entries.NotStorable, match="its op digest_test_op holds objects of its own"):
        cache_entries.trace_digest(_first_trace(lambda t: op(t), x))
