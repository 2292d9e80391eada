"""Tracing a repeated block once (``thunder_ext/regional/replay.py``, ``keys.py``).

A replayed model must be the same computation as the interpreted one: the same outputs and cache contents, the same
decisions, the same checks (a replayed layer's numbers and strings checked by the Python guards, not by thunder's
prologue: ``checked_numbers`` counts both). Each rule of ``regional/keys.py`` has a case that must be interpreted, and
the compile log names why. Every comparison is against the same model compiled with ``replay_blocks=False``
(thunder's interpreter, as before) and against eager.
"""

from __future__ import annotations

import copy
import logging
import math
import operator
import re

import pytest
import thunder
import torch
from torch import nn
from torch.testing import assert_close

import thunder_ext
from helpers import VOCAB, caches, small_llama
from thunder_ext.executors import checks
from thunder_ext.transforms import InplaceTransform

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")
# the tests read what replay and the block compiler did (records, log lines), which a loaded entry did not do
pytestmark = pytest.mark.fresh_compilations


def traced_blocks(jitted):
    """What the last compilation of ``jitted`` did with its repeated blocks."""
    (transform,) = [t for t in thunder.compile_data(jitted).transforms if isinstance(t, InplaceTransform)]
    return transform.traced_blocks


def hows(jitted) -> list[str]:
    return [c.how for c in traced_blocks(jitted).calls]


def prologue_statements(jitted) -> set[str]:
    """The prologue's unpacking of the module's tensors and values, and its checks, each once, with the numbered
    names of values (``i53``, ``f472``, ``m6``) made anonymous: replay names them anew. The Python guards' check is
    compared apart (``guarded_values``)."""
    lines = str(thunder.last_prologue_traces(jitted)[-1]).splitlines()
    kept = {re.sub(r"\b[a-z]+\d+\b", "n", line.split("#")[0].strip()) for line in lines}
    return {s for s in kept if ("check_" in s or "get_parameter" in s or "get_buffer" in s)
            and "check_python_values" not in s}  # fmt: skip


def guarded_values(jitted) -> set[tuple]:
    """The values the Python guards' check reads again, each path with ``x.__dict__[k]`` as ``x.k`` (the entry either
    reads). A replay checks each value the interpretation does; it may check more (each of a replayed block's values
    is read again as it reads on that block, those its interpretation found through another block's wrapper too)."""
    (guard,) = [b for b in thunder.last_prologue_traces(jitted)[-1].bound_symbols if b.sym.name == "check_python_values"]
    return {(root, _entries(steps), (*e[:2], _entries(e[2])) if (e := expected)[0] == "same" else e)
            for root, steps, expected in checks.decoded(guard.args[0])}  # fmt: skip


# thunder's prologue symbols that unpack a module's member, by a name or dotted names from what they take
_UNPACKS = {"unpack_submodule", "unpack_attr", "unpack_getitem", "unpack_parameter", "unpack_buffer"}
_MEMBERS = {("attr", "_modules"), ("attr", "_parameters"), ("attr", "_buffers"), ("attr", "__dict__")}


def checked_numbers(jitted) -> set[tuple[str, type, object]]:
    """Each number and string of the module that the prologue checks, as ``(dotted path, type, value)``: thunder's
    checks of what its prologue unpacked from the module, and the Python guards' of what they read from it. A replay
    makes a replayed block's number checks Python checks (``python_guards.replay_values``): each is one or the
    other, so the union is what a model's prologue checks."""
    trace = thunder.last_prologue_traces(jitted)[-1]
    paths, found = {}, set()
    for b in trace.bound_symbols:
        if b.sym.name == "unpack_function_obj":
            paths[b.output.name] = ""
        elif b.sym.name == "unpack_thunder_module":  # the module that the ThunderModule runs
            paths[b.output.name] = paths[b.args[0].name]
        elif b.sym.name in _UNPACKS and getattr(b.args[0], "name", None) in paths:
            paths[b.output.name] = ".".join(filter(None, (paths[b.args[0].name], str(b.args[1]))))
        elif b.sym.name in ("check_number_type_and_value", "check_string_value") and b.args[0].name in paths:
            found.add((paths[b.args[0].name], type(b.args[1]), b.args[1]))
    (guard,) = [b for b in trace.bound_symbols if b.sym.name == "check_python_values"]
    for root, steps, expected in checks.decoded(guard.args[0]):
        path = ".".join(str(key) for step in steps if step not in _MEMBERS for key in step[1:])
        kind, *value = expected
        if root == 0 and kind == "float":
            found.add((path, float, float.fromhex(value[0])))
        elif root == 0 and kind == "plain" and value[0] in ("int", "str"):
            found.add((path, int if value[0] == "int" else str, value[1]))
        elif root == 0 and kind == "is" and type(value[0]) is bool:
            found.add((path, bool, value[0]))
    return found


def _entries(steps: tuple) -> tuple:
    out = []
    for step in steps:
        if out and out[-1] == ("attr", "__dict__") and step[0] == "item":
            out[-1] = ("attr", step[1])
        else:
            out.append(step)
    return tuple(out)


def decode_pair(n_layer: int = 3, **overrides):
    """A litgpt model with its KV cache, and two ``thunder_ext.jit`` copies: replaying and interpreting."""
    torch.manual_seed(0)
    eager = small_llama(n_layer=n_layer, **overrides)
    eager.set_kv_cache(batch_size=1, max_seq_length=32)
    replayed = thunder_ext.jit(copy.deepcopy(eager), block_programs=False)
    interpreted = thunder_ext.jit(copy.deepcopy(eager), replay_blocks=False)
    return eager, replayed, interpreted


def test_a_replayed_litgpt_model_is_the_interpreted_one(caplog, executor_set):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    # two layers under the torch.compile executor (CI time: Inductor compiles each layer's ops four times)
    n_layer = 2 if executor_set == "torch_compile" else 3
    eager, replayed, interpreted = decode_pair(n_layer)
    x, pos = torch.randint(0, VOCAB, (1, 5)), torch.arange(5)
    with torch.inference_mode():
        for step in range(3):  # a prefill, then two decode steps: two compilations each
            want = eager(x, pos)
            got, reference = replayed(x, pos), interpreted(x, pos)
            assert torch.equal(got, reference)
            assert_close(got, want)
            for ours, theirs in zip(caches(replayed._model), caches(interpreted._model)):
                assert torch.equal(ours, theirs)
            if step < 2:
                assert hows(replayed) == ["interpreted"] + ["replayed"] * (n_layer - 1)
                assert traced_blocks(interpreted) is None  # replay off: the lookaside interprets, records nothing
                assert prologue_statements(replayed) <= prologue_statements(interpreted)
                assert checked_numbers(replayed) >= checked_numbers(interpreted)
                assert guarded_values(replayed) >= guarded_values(interpreted)
            ours = [(d.how, d.source, d.nbytes) for d in thunder_ext.inplace_decisions(replayed)]
            assert ours == [(d.how, d.source, d.nbytes) for d in thunder_ext.inplace_decisions(interpreted)]
            assert len(ours) == 2 * n_layer and all(d[0] != "copy" for d in ours)  # k and v of each layer, in place
            x, pos = got[:, -1:].argmax(-1), pos[-1:] + 1
    first, second = [len(thunder.last_traces(j)[-1].bound_symbols) for j in (replayed, interpreted)]
    assert first == second
    logged = [r.getMessage() for r in caplog.records]
    summary = (rf"thunder_ext: traced GPT\.forward: {n_layer} calls of repeated blocks \({n_layer} of Block\): "
               rf"1 interpreted \(\d+\.\d s\), {n_layer - 1} replayed \(\d+\.\d s\)")
    assert sum(bool(re.fullmatch(summary, m)) for m in logged) == 2, logged


def test_every_layer_reads_its_own_parameters_and_cache():
    # a replay that swapped in the recorded layer's tensors would compute with layer 0's weights everywhere
    eager, replayed, _ = decode_pair()
    with torch.no_grad():
        eager.transformer.h[2].attn.proj.weight.mul_(3)
        replayed._model.transformer.h[2].attn.proj.weight.mul_(3)
    x, pos = torch.randint(0, VOCAB, (1, 5)), torch.arange(5)
    with torch.inference_mode():
        assert_close(replayed(x, pos), eager(x, pos))
    assert hows(replayed) == ["interpreted"] + ["replayed"] * 2
    written = [bool(t[:, :, :5].any()) for t in caches(replayed._model)]
    assert all(written), "each layer's own cache buffers hold the prompt"


def tiny_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def hf_forward(compiled, ids: torch.Tensor) -> torch.Tensor:
    # a causal mask of its own: HF's masks are built with torch.vmap, which thunder 0.2.6 does not trace
    mask = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).tril()[None, None]
    with torch.inference_mode():
        return compiled(ids, attention_mask=mask, use_cache=False).logits


def assert_hf_decoder_replays(compiled) -> None:
    """``compiled(model, replay)`` compiles the model replaying or not: the two must be one computation."""
    model, ids = tiny_llama(), torch.randint(0, VOCAB, (1, 6))
    replayed, interpreted = compiled(copy.deepcopy(model), True), compiled(copy.deepcopy(model), False)
    got, reference = hf_forward(replayed, ids), hf_forward(interpreted, ids)
    assert torch.equal(got, reference)
    assert_close(got, hf_forward(model, ids))
    assert hows(replayed) == ["interpreted", "replayed", "replayed"]
    assert prologue_statements(replayed) <= prologue_statements(interpreted)
    assert checked_numbers(replayed) >= checked_numbers(interpreted)
    assert guarded_values(replayed) >= guarded_values(interpreted)


def test_a_replayed_hf_decoder_is_the_interpreted_one():
    assert_hf_decoder_replays(lambda model, replay: thunder_ext.jit(model, replay_blocks=replay))


@pytest.mark.executor_sets("defaults")  # the recipe picks its own executors
def test_a_replayed_hf_decoder_is_the_interpreted_one_through_the_recipe_and_the_plugin():
    from thunder_ext.integrations.hf_transformers import HFTransformersRecipe

    def compiled(model, replay: bool):
        plugin = thunder_ext.Inplace(replay_blocks=replay)
        return thunder.compile(model, recipe=HFTransformersRecipe(), plugins=[plugin])

    assert_hf_decoder_replays(compiled)


# ---- what must be interpreted, and the log line that says why -----------------------------------------------------


class Layer(nn.Module):
    """A toy repeated block: ``how`` picks what its ``forward`` does besides a linear layer."""

    def __init__(self, i: int, how: str = "", width: int = 8, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.lin = nn.Linear(width, 8, dtype=dtype)
        self.index = i  # differs per layer; read only where ``how`` says
        self.seen: list[int] = []
        self.calls = 0
        self.how = how

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        if self.how == "reads its index":
            x = x * (self.index + 1)
        elif self.how == "reads its index's sign":  # 0.0 and -0.0 compare equal, and differ here
            x = x * math.copysign(1.0, self.index)
        elif self.how == "appends to a list":
            self.seen.append(1)
        elif self.how == "assigns an attribute":
            self.calls = self.calls + 1
        elif self.how == "writes a global":
            global LAST
            LAST = 1
        elif self.how == "reads a shared value":
            x = x * SHARED.scale
        elif self.how == "adds a shared tensor":
            x = x + SHARED.offset
        elif self.how == "reads its index through vars":  # C functions read attributes unseen by thunder
            x = x * (vars(self)["index"] + 1)
        elif self.how == "reads its index through attrgetter":
            x = x * (operator.attrgetter("index")(self) + 1)
        elif self.how == "reads its index through object.__getattribute__":
            x = x * (object.__getattribute__(self, "index") + 1)
        elif self.how == "reads a shared value through vars":
            x = x * vars(SHARED)["scale"]
        elif self.how == "adds a global tensor":
            x = x + OFFSET
        return torch.tanh(self.lin(x.to(self.lin.weight.dtype)) * scale).to(torch.float32)


LAST = 0


class Shared:
    """Values every layer reads, outside the layers: a config that the model changes between them."""

    def __init__(self) -> None:
        self.scale, self.offset = 1.0, torch.zeros(8)


SHARED = Shared()
OFFSET = torch.ones(8)


def bump() -> None:
    SHARED.scale = SHARED.scale + 1.0


def another_offset() -> None:
    SHARED.offset = SHARED.offset + 1.0


class Stack(nn.Module):
    def __init__(self, layers: list[nn.Module], scales: list[float] | None = None, between=None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.scales = scales or [1.0] * len(layers)
        self.between = between

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, scale in zip(self.layers, self.scales):
            x = layer(x, scale)
            if self.between is not None:
                self.between()
        return x


def replayed_matches_eager(model: nn.Module) -> list[str]:
    """Run ``model`` eagerly and under ``thunder_ext.jit``; the jitted result must equal eager's; returns how each
    block was traced."""
    torch.manual_seed(1)
    x = torch.randn(2, 8)
    SHARED.__init__()  # which a model may change between its layers
    want = copy.deepcopy(model)(x)
    SHARED.__init__()
    jitted = thunder_ext.jit(model)
    assert_close(jitted(x), want)
    return hows(jitted)


@pytest.mark.parametrize("how", ["", "reads a shared value", "adds a shared tensor", "adds a global tensor"])
def test_blocks_that_differ_only_in_what_they_never_read_are_replayed(how):
    assert replayed_matches_eager(Stack([Layer(i, how) for i in range(4)])) == ["interpreted"] + ["replayed"] * 3


@pytest.mark.parametrize(
    "model, expected, reason",
    [
        (lambda: Stack([Layer(i, "reads its index") for i in range(3)]), ["interpreted"] * 3,
         "attribute index differs and is read"),
        (lambda: Stack([Layer(i, "reads its index's sign") for i in (0.0, -0.0, 0.0)]),
         ["interpreted", "interpreted", "replayed"], "attribute index differs and is read"),
        (lambda: Stack([Layer(i, "appends to a list") for i in range(3)]), ["interpreted"] * 3,
         "the recorded Layer changes a list it did not make (list.append)"),
        (lambda: Stack([Layer(i, "assigns an attribute") for i in range(3)]), ["interpreted"] * 3,
         "the recorded Layer assigns the attribute 'calls' of an object it did not make"),
        (lambda: Stack([Layer(i, "writes a global") for i in range(3)]), ["interpreted"] * 3,
         "the recorded Layer runs STORE_GLOBAL"),
        (lambda: Stack([Layer(i) for i in range(3)], scales=[1.0, 2.0, 2.0]),
         ["interpreted", "interpreted", "replayed"], "arguments of other metadata or values"),
        (lambda: Stack([Layer(0), Layer(1, width=8, dtype=torch.float64), Layer(2)]),
         ["interpreted", "interpreted", "replayed"], "a module of another structure"),
        (lambda: Stack([Layer(i, "reads a shared value") for i in range(3)], between=bump),
         ["interpreted"] * 3, "attribute 'scale' changed since the recorded call"),
        (lambda: Stack([Layer(i, "adds a shared tensor") for i in range(3)], between=another_offset),
         ["interpreted"] * 3, "attribute 'offset' changed since the recorded call"),
        (lambda: Stack([Layer(i, "reads its index through vars") for i in range(3)]), ["interpreted"] * 3,
         "the recorded Layer passes a Layer to vars, whose reads thunder cannot see"),
        (lambda: Stack([Layer(i, "reads its index through attrgetter") for i in range(3)]), ["interpreted"] * 3,
         "the recorded Layer passes a Layer to attrgetter.__call__, whose reads thunder cannot see"),
        (lambda: Stack([Layer(i, "reads its index through object.__getattribute__") for i in range(3)]),
         ["interpreted"] * 3, "the recorded Layer passes a Layer to object.__getattribute__, whose reads thunder "
         "cannot see"),
        # not changed between layers: thunder 0.2.6 refuses a change to an object that vars() read
        (lambda: Stack([Layer(i, "reads a shared value through vars") for i in range(3)]),
         ["interpreted"] * 3, "the recorded Layer passes a Shared to vars, whose reads thunder cannot see"),
    ],
    ids=["per-layer-value-read", "per-layer-signed-zero-read", "list-append", "attribute-assignment", "global-write",
         "per-layer-argument", "parameter-dtype", "shared-state-changed-between-calls",
         "shared-tensor-reassigned-between-calls", "per-layer-value-read-by-vars", "per-layer-value-read-by-attrgetter",
         "per-layer-value-read-by-object-getattribute", "shared-state-read-by-vars"],
)  # fmt: skip
@pytest.mark.executor_sets("defaults")  # CI time: what is interpreted is decided while tracing, before any executor
def test_a_block_that_a_replay_would_trace_differently_is_interpreted(model, expected, reason, caplog):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    assert replayed_matches_eager(model()) == expected
    (summary,) = [r.getMessage() for r in caplog.records if "calls of repeated blocks" in r.getMessage()]
    assert f"interpreted: {reason}" in summary, summary


def test_a_layer_with_a_hook_is_interpreted_and_the_others_replayed(caplog):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    model = Stack([Layer(i) for i in range(4)])
    model.layers[2].register_forward_hook(lambda module, args, out: out * 2)
    assert replayed_matches_eager(model) == ["interpreted", "replayed", "interpreted", "replayed"]
    assert any("1 interpreted: module hooks" in r.getMessage() for r in caplog.records)


@pytest.mark.executor_sets("defaults")  # CI time: what is interpreted is decided while tracing, before any executor
def test_a_litgpt_cache_converted_on_its_first_call_is_interpreted_every_time(caplog):
    # litgpt's KVCache converts its buffers to the activations' dtype (``self.k = self.k.to(k.dtype)``)
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    eager = small_llama(n_layer=3)
    eager.set_kv_cache(batch_size=1, max_seq_length=16, dtype=torch.float64)
    jitted = thunder_ext.jit(copy.deepcopy(eager))
    x, pos = torch.randint(0, VOCAB, (1, 4)), torch.arange(4)
    with torch.inference_mode():
        assert_close(jitted(x, pos), eager(x, pos))
    assert hows(jitted) == ["interpreted"] * 3
    assert any("the recorded Block assigns the attribute 'k'" in r.getMessage() for r in caplog.records)


def test_replay_is_off_where_asked_and_in_stock_thunder():
    model = Stack([Layer(i) for i in range(3)])
    x = torch.randn(2, 8)
    off = thunder_ext.jit(copy.deepcopy(model), replay_blocks=False)
    assert_close(off(x), model(x))
    assert traced_blocks(off) is None
    stock = thunder.jit(copy.deepcopy(model))
    assert_close(stock(x), model(x))
    assert not any(isinstance(t, InplaceTransform) for t in thunder.compile_data(stock).transforms)


# ---- blocks held in an nn.Sequential ------------------------------------------------------------------------------


class MixerBlock(nn.Module):
    """A ViT's block without attention: a norm and an MLP of its own, an ``nn.Sequential`` of one-op modules."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class Basic(nn.Module):
    """A ResNet's basic block, the first of a stage with a downsampling shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out)
        self.conv2, self.bn2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out)
        shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
        self.down = shortcut if stride != 1 or c_in != c_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


def run_three_ways(model: nn.Module, x: torch.Tensor, *, train: bool) -> tuple[nn.Module, nn.Module]:
    """``model`` run eagerly, under ``thunder_ext.jit`` replaying and interpreting, with a backward where ``train``:
    the replaying way's output, gradients and buffers equal the interpreting way's bitwise and eager's closely;
    returns the two jitted models."""
    jitted = [thunder_ext.jit(copy.deepcopy(model)), thunder_ext.jit(copy.deepcopy(model), replay_blocks=False)]
    with torch.set_grad_enabled(train):
        want, (got, reference) = model(x), [j(x) for j in jitted]
        if train:
            for out in (want, got, reference):
                out.square().sum().backward()
    assert torch.equal(got, reference)
    assert_close(got, want)
    for ours, theirs, eagers in zip(*(m.parameters() for m in (*jitted, model)), strict=True):
        assert torch.equal(ours.grad, theirs.grad) if train else ours.grad is None
        if train:
            assert_close(ours.grad, eagers.grad, atol=1e-4, rtol=1e-3)  # thunder's batch norm sums in its order
    for ours, theirs, eagers in zip(*(m.buffers() for m in (*jitted, model)), strict=True):
        assert torch.equal(ours, theirs)
        assert_close(ours, eagers)
    return jitted[0], jitted[1]


def test_the_blocks_of_an_nn_sequential_are_replayed_and_the_modules_of_their_mlp_are_not():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Sequential(*(MixerBlock() for _ in range(4))), nn.Linear(8, 2)).eval()
    replayed, interpreted = run_three_ways(model, torch.randn(2, 3, 4), train=False)
    # the candidates are the four blocks: not the outer Sequential's two Linears nor the MLPs' modules (one-op
    # modules holding none, which a replay would only slow)
    assert [(c.path, c.how) for c in traced_blocks(replayed).calls] == [("1.0", "interpreted")] + [
        (f"1.{i}", "replayed") for i in (1, 2, 3)]  # fmt: skip
    ops = [len(thunder.last_traces(j)[-1].bound_symbols) for j in (replayed, interpreted)]
    assert ops[0] <= ops[1], ops


def test_a_resnet_stage_in_training_replays_its_blocks_with_eagers_running_stats_and_gradients(caplog, executor_set):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    stage = nn.Sequential(Basic(4, 8, stride=2), Basic(8, 8), Basic(8, 8))
    replayed, _ = run_three_ways(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), stage), torch.randn(2, 3, 8, 8),
                                 train=True)  # fmt: skip
    # the first block takes 4 channels and has a shortcut; the others replay the second's record, the batch norms'
    # writes of their running stats included, which keep each call of a block program out (grad is on)
    assert hows(replayed) == ["interpreted", "interpreted", "replayed"]
    (summary,) = [r.getMessage() for r in caplog.records if "calls of repeated blocks" in r.getMessage()]
    assert "1 interpreted: arguments of other metadata or values, recorded" in summary, summary
    if executor_set == "defaults":  # the torch.compile executor's compilations ask for no programs
        assert "without a block program: its batch_norm writes inside an op" in summary, summary


@pytest.mark.executor_sets("defaults")  # CI time: the torch.compile executor is in the growing cache's own tests
@pytest.mark.parametrize("programs", [False, True], ids=["replayed", "block programs"])
def test_growth_and_new_length_buckets_replay_and_stay_strict(caplog, programs):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    eager = small_llama(n_layer=3, block_size=64)
    jitted = thunder_ext.jit(copy.deepcopy(eager), strict=True, block_programs=programs)  # a copy would raise
    eager.set_kv_cache(batch_size=1, max_seq_length=32)
    thunder_ext.set_kv_cache(jitted, batch_size=1, max_seq_length=32, min_capacity=4)
    x, pos = torch.randint(0, VOCAB, (1, 3)), torch.arange(3)
    with torch.inference_mode():
        for _ in range(10):  # grows at positions 4 and 8
            logits = jitted(x, pos)
            assert_close(logits, eager(x, pos))
            x, pos = logits[:, -1:].argmax(-1), pos[-1:] + 1
        prompt = torch.randint(0, VOCAB, (1, 11))  # a new sequence in a new length bucket
        assert_close(jitted(prompt, torch.arange(11)), eager(prompt, torch.arange(11)))
    compiled = sum("thunder_ext: compiled GPT.forward" in r.getMessage() for r in caplog.records)
    summaries = [r.getMessage() for r in caplog.records if "calls of repeated blocks (3 of Block)" in r.getMessage()]
    assert compiled >= 4 and len(summaries) == compiled, summaries
    assert all(": 1 interpreted" in s and "2 replayed" in s for s in summaries), summaries
    assert all(("compiled Block once" in s and "called 3 times" in s) == programs for s in summaries), summaries


@pytest.mark.executor_sets("defaults")  # a data structure of thunder's interpreter: nothing compiled
def test_the_prologue_checks_are_thunders_list_without_its_quadratic_scan():
    from thunder.core import jit_ext
    from thunder.core.proxies import TensorProxy

    from thunder_ext.thunder026 import constraints

    class Ctx:
        def __init__(self):
            self._constraints = []

    with thunder.core.trace.tracectx(thunder.core.trace.TraceCtx()):
        a, b = (TensorProxy(shape=(2,), device=thunder.core.devices.cpu, dtype=thunder.float32) for _ in range(2))
    check, other = (lambda *args: None), (lambda *args: None)
    sequence = [(check, a), (check, b), (check, a), (other, a), (check, a, 1), (check, a, True), (check, a, [1]),
                (check, a, [1]), (check, a, [2]), (other, a), (check, b)]  # fmt: skip
    ours, thunders = Ctx(), Ctx()
    for c in sequence:
        constraints.add_constraint(ours, c)
        constraints._thunders(thunders, c)
    assert ours._constraints == thunders._constraints
    assert len(ours._constraints) == 6  # (check, a), (check, b), (other, a), (check, a, 1), (check, a, [1]), [2]
    thunder_ext.adapt_thunder()
    assert jit_ext.JitCtx.add_constraint is constraints.add_constraint


class _Scaled(nn.Module):
    """Parameters, a buffer and a number attribute: the prologue checks tensors' metadata and a number."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.register_buffer("shift", torch.ones(4))
        self.scale = 2.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x) * self.scale
        return x + self.shift


@pytest.mark.executor_sets("defaults")  # the prologue thunder's interpreter makes: its checks, not the executors'
def test_the_prologue_makes_thunders_checks_without_its_quadratic_renaming(monkeypatch):
    from thunder_ext.thunder026 import constraints

    def checks_made() -> list[str]:
        jitted = thunder_ext.jit(_Scaled(), replay_blocks=False)
        jitted(torch.ones(2, 4))
        lines = str(thunder.last_prologue_traces(jitted)[0]).splitlines()
        return [line.strip() for line in lines if re.search(r"\bcheck_\w+\(", line)]

    ours = checks_made()
    with monkeypatch.context() as thunders:  # every check renamed and made by thunder's own loop
        thunders.setattr(constraints, "_OF_OUTPUTS", ())
        theirs = checks_made()
    # the same checks (6 parameters, the buffer and the input each a tensor's; the scale a number's), some later
    assert sorted(ours) == sorted(theirs) and ours != theirs
    assert sum("check_tensor_shape_and_metadata" in c for c in ours) == 8 and any(", 2.5)" in c for c in ours)
    model = _Scaled()
    jitted = thunder_ext.jit(model, replay_blocks=False)
    jitted(torch.ones(2, 4))
    model.shift = torch.ones(4, dtype=torch.float64)  # a check that moved still decides: a miss, and eager's result
    assert_close(jitted(torch.ones(2, 4)), model(torch.ones(2, 4)))
    assert thunder.cache_misses(jitted) == 2


@pytest.mark.executor_sets("defaults")  # a data structure of thunder's interpreter: nothing compiled
def test_the_interpreter_decodes_each_code_object_once_and_as_dis_does():
    import dis

    from thunder.core import interpreter

    def f(x, k=2):
        return x * k

    def g(x, k=2):  # the same body on other lines: its own instructions
        return x * k

    thunder_ext.adapt_thunder()
    decoded = interpreter.dis.get_instructions(f.__code__)
    assert decoded == tuple(dis.get_instructions(f.__code__))
    assert interpreter.dis.get_instructions(f.__code__) is decoded  # once
    assert [i.positions for i in interpreter.dis.get_instructions(g.__code__)] != [i.positions for i in decoded]
    assert interpreter.dis.opmap is dis.opmap  # the rest is dis
    jf = thunder.jit(f)
    assert torch.equal(jf(torch.ones(2)), torch.full((2,), 2.0))


# ---- an index that only selects: HF's ``past_key_values.layers[self.layer_idx]`` ---------------------------------


class Slot:
    """One layer's state outside the model, as an HF cache layer: a tensor, and a number that changes the ops."""

    def __init__(self, t: torch.Tensor, window: float | None = None) -> None:
        self.t, self.window = t, window


class Bank:
    """Every layer's state, passed to every layer, which finds its own by its index (HF's ``Cache.layers``)."""

    def __init__(self, n: int) -> None:
        self.slots = [Slot(torch.full((8,), float(i))) for i in range(n)]
        self.scales = [torch.full((8,), 1.0 + i) for i in range(n)]


class Selecting(nn.Module):
    """A layer that selects its state by its index; ``how`` adds one more use of the index, or of what it selected."""

    def __init__(self, index: int, how: str = "") -> None:
        super().__init__()
        self.lin, self.index, self.how = nn.Linear(8, 8), index, how

    def forward(self, x: torch.Tensor, bank: Bank) -> torch.Tensor:
        slot = bank.slots[self.index]
        y = x + slot.t * bank.scales[self.index]
        if slot.window is not None:
            y = y * slot.window
        if self.how == "writes what it selects":
            slot.t.add_(1.0)
        elif self.how == "compares its index":
            y = -y if self.index < 2 else y
        elif self.how == "adds its index":
            y = y + self.index
        elif self.how == "formats its index":
            y = y * len(f"{self.index:03}")
        elif self.how == "hashes its index":
            y = y * {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}[self.index]
        elif self.how == "passes its index in a tuple":
            y = y * max((self.index, 1))
        elif self.how == "passes its index to a C function":
            y = y * abs(self.index - 1)
        elif self.how == "reads a slot by a constant too":
            y = y + bank.slots[0].t
        elif self.how == "compares what it selects":
            y = -y if slot is bank.slots[0] else y
        elif self.how == "iterates the slots":
            y = y + sum(s.t for s in bank.slots)
        return torch.tanh(self.lin(y))


class SelectingStack(nn.Module):
    def __init__(self, how: str = "", n: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Selecting(i, how) for i in range(n))

    def forward(self, x: torch.Tensor, bank: Bank) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, bank)
        return x


def selecting_matches_eager(model: nn.Module, bank: Bank, caplog, edit=None) -> tuple[list[str], str]:
    """``model`` with ``bank`` eagerly and under ``thunder_ext.jit`` (a bank of its own, equal): the same outputs and
    banks, at a first call and at one after ``edit(model, bank)``; returns how each block was traced the first time,
    and the compile log's summary."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(1)
    x = torch.randn(2, 8)
    jitted, ours = thunder_ext.jit(copy.deepcopy(model)), copy.deepcopy(bank)
    with torch.no_grad():
        assert_close(jitted(x, ours), model(x, bank))
        traced = hows(jitted)
        if edit is not None:
            edit(model, bank)
            edit(jitted._model, ours)
            assert_close(jitted(x, ours), model(x, bank))
    for a, b in zip(ours.slots, bank.slots, strict=True):
        assert_close(a.t, b.t)
    (summary, *_) = [r.getMessage() for r in caplog.records if "calls of repeated blocks" in r.getMessage()]
    return traced, summary


@pytest.mark.parametrize("how", ["", "writes what it selects"])
def test_layers_whose_index_only_selects_their_state_are_replayed(how, caplog):
    traced, _ = selecting_matches_eager(SelectingStack(how), Bank(4), caplog)
    assert traced == ["interpreted", "replayed", "replayed", "replayed"]


@pytest.mark.parametrize("how", ["", "writes what it selects"])
def test_layers_whose_index_only_selects_their_state_are_replayed_in_a_training_step(how, caplog):
    """With grad: the replayed layers (a block program with its backward where the block writes nothing, else its
    ops replayed) give eager's outputs, parameter gradients and states."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    torch.manual_seed(0)
    model, x = SelectingStack(how), torch.randn(2, 8)
    jitted, ours, bank = thunder_ext.jit(copy.deepcopy(model)), Bank(4), Bank(4)
    got, want = jitted(x, ours), model(x, bank)
    got.sum().backward()
    want.sum().backward()
    assert_close(got, want)
    for a, b in zip(jitted._model.parameters(), model.parameters(), strict=True):
        assert_close(a.grad, b.grad)
    for a, b in zip(ours.slots, bank.slots, strict=True):
        assert_close(a.t, b.t)
    assert hows(jitted) == ["interpreted", "replayed", "replayed", "replayed"]


@pytest.mark.parametrize("how", ["compares its index", "adds its index", "formats its index", "hashes its index",
                                 "passes its index in a tuple", "passes its index to a C function",
                                 "reads a slot by a constant too", "compares what it selects", "iterates the slots"])
@pytest.mark.executor_sets("defaults")  # CI time: what is interpreted is decided while tracing, before any executor
def test_layers_that_use_their_index_otherwise_are_interpreted(how, caplog):
    traced, summary = selecting_matches_eager(SelectingStack(how), Bank(4), caplog)
    assert traced == ["interpreted"] * 4
    assert "3 interpreted: attribute index differs and is read, recorded" in summary, summary


@pytest.mark.executor_sets("defaults")  # CI time: what is interpreted is decided while tracing, before any executor
def test_a_layer_whose_selected_state_traces_other_ops_is_recorded_apart(caplog):
    """A number of a layer's state that differs (a sliding window, in HF's cache): that layer is recorded apart,
    and the others replay the first."""
    bank = Bank(4)
    bank.slots[2].window = 3.0
    traced, summary = selecting_matches_eager(SelectingStack(), bank, caplog)
    assert traced == ["interpreted", "replayed", "interpreted", "replayed"]
    assert "1 interpreted: what it selects by its index differs, recorded" in summary, summary


def _another_index(model: nn.Module, bank: Bank) -> None:
    model.layers[2].index = 0  # two layers of one state


def _another_window(model: nn.Module, bank: Bank) -> None:
    bank.slots[1].window = 3.0


def _another_slot(model: nn.Module, bank: Bank) -> None:
    bank.slots[3] = Slot(torch.full((8,), -1.0))


@pytest.mark.parametrize("edit", [_another_index, _another_window, _another_slot], ids=["index", "window", "slot"])
@pytest.mark.executor_sets("defaults")
def test_a_replayed_layer_whose_index_or_state_changes_after_compiling_computes_eagers_output(edit, caplog):
    traced, _ = selecting_matches_eager(SelectingStack(), Bank(4), caplog, edit)
    assert traced == ["interpreted", "replayed", "replayed", "replayed"]


@pytest.mark.executor_sets("defaults")  # the compile cache's entries: what is traced and checked, before any executor
def test_a_compilation_whose_layers_select_their_state_is_loaded_only_where_its_indices_are_the_same(
    monkeypatch, tmp_path
):
    """Saved to a compile cache folder, a replayed model is loaded by a jit of its own; a model whose two layers
    select each other's state (their indices swapped) loads nothing and computes eager's outputs."""
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = SelectingStack()
    swapped = copy.deepcopy(model)
    swapped.layers[1].index, swapped.layers[2].index = 2, 1
    for m, loads in ((model, 0), (model, 1), (swapped, 0)):
        jitted, bank, ours = thunder_ext.jit(copy.deepcopy(m), compile_cache=True), Bank(4), Bank(4)
        with torch.no_grad():
            assert_close(jitted(x, ours), m(x, bank))
        assert thunder_ext.cache_loads(jitted) == loads
