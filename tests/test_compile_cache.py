"""The compile cache on disk (``thunder_ext.compile_cache``): each rule of its docstrings, in fresh processes.

Each run is a new Python process (``run``) that compiles ``Net`` (a module of this test's own folder, so that a
test can change its code) with ``thunder_ext.jit``, calls it twice, and reports what it computed, what the
extension decided and logged, and thunder's cache misses. A warm run is compared with a cold one: equal outputs,
equal buffer contents, equal decisions, and no compilation.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import thunder
import torch

from thunder_ext.compile_cache import store
from thunder_ext.compile_cache.loaded_traces import FirstCall, LookError
from thunder_ext.thunder026 import cache_entries
from thunder_ext.thunder026.cache_entries import bytecode

# the cache's rules under the default executors; what the torch.compile executor compiles is tested on its own
pytestmark = pytest.mark.executor_sets("defaults")

HELPER = '''
def activation(x):
    return x.relu()
'''

MODEL = '''
import torch
from helper_under_test import activation

SCALE = 2.0


class Net(torch.nn.Module):
    def __init__(self, n: int = 8, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale  # read by the traced code: thunder's prologue checks it, unless a recipe prunes that
        self.lin = torch.nn.Linear(n, n)
        self.register_buffer("seen", torch.zeros(n))

    def forward(self, x):
        self.seen.add_(x.sum(0))  # a write of a buffer: the extension proves it and runs it in place
        return activation(self.lin(x)) * SCALE * self.scale
'''

RUNNER = '''
import json, logging, os, sys
import torch, thunder, thunder_ext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_under_test import Net

options = json.loads(sys.argv[1])
logs = []
handler = logging.Handler()
handler.emit = lambda record: logs.append(record.getMessage())
logging.getLogger("thunder_ext").addHandler(handler)
dtype = getattr(torch, options.get("dtype", "float32"))
torch.manual_seed(0)
net = Net(options.get("n", 8), options.get("scale", 1.0)).to(dtype)
executors = None
if options.get("executors") == "torch_compile":
    from thunder.executors.torch_compile import torch_compile_ex
    executors = [torch_compile_ex, *thunder.get_default_executors()]
elif options.get("executors") == "torch only":
    executors = [thunder.get_executor("torch"), thunder.get_executor("python")]
if options.get("entry") == "plugin":
    jitted = thunder.compile(net, recipe=thunder_ext.DefaultExecutorsRecipe(), plugins="inplace")
else:
    jitted = thunder_ext.jit(net, strict=options.get("strict", False), executors=executors,
                             compile_cache=options.get("compile_cache"))
x = torch.randn(4, options.get("n", 8), dtype=dtype)
outs = [jitted(x.clone()), jitted(x + 1)]  # the first call's tensor is gone when its traces are looked at
looked = {}
if options.get("look"):  # the ops of every trace thunder shows, before the counters and decisions are read
    looked = {what: [[b.sym.name for b in t.bound_symbols] for t in getattr(thunder, what)(jitted)]
              for what in ("last_traces", "last_prologue_traces", "last_backward_traces")}
print(json.dumps({
    "outs": [o.tolist() for o in outs],
    "seen": net.seen.tolist(),
    "decisions": [str(d) for d in thunder_ext.inplace_decisions(jitted)],
    "logs": logs,
    "misses": thunder.cache_misses(jitted),
    "hits": thunder.cache_hits(jitted),
    "loads": thunder_ext.cache_loads(jitted),
    "looked": looked,
}))
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the model and the runner; the cache in its own folder below, empty."""
    for name, text in (("model_under_test.py", MODEL), ("helper_under_test.py", HELPER), ("runner.py", RUNNER)):
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.fixture(scope="module")
def _cold(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("cold")
    for name, text in (("model_under_test.py", MODEL), ("helper_under_test.py", HELPER), ("runner.py", RUNNER)):
        (folder / name).write_text(text)
    return folder, run(folder)


@pytest.fixture
def cold(_cold, tmp_path: Path) -> tuple[Path, dict]:
    """A project whose cache holds what one cold run of the runner saved (made once, copied for each test), and
    what that run reported."""
    folder, result = _cold
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    return tmp_path, result


def env_of(project: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "THUNDER_EXT_CACHE": "1", "THUNDER_EXT_CACHE_DIR": str(project / "cache"), **extra}
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def run(project: Path, script: str = "runner.py", env: dict[str, str] | None = None, **options) -> dict:
    """A fresh process running ``script`` with ``options``; what it printed last, as JSON."""
    done = subprocess.run(
        [sys.executable, str(project / script), json.dumps(options)],
        env=env or env_of(project), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def flat(outs: list) -> list[float]:
    return [v for out in outs for row in out for v in row]


def entry_files(project: Path) -> list[Path]:
    return sorted((project / "cache").glob("*/*.entry"))


def loaded(result: dict) -> bool:
    return any("from the compile cache" in m and m.startswith("thunder_ext: loaded") for m in result["logs"])


def assert_same_computation(warm: dict, cold: dict) -> None:
    assert warm["outs"] == cold["outs"]
    assert warm["seen"] == cold["seen"]  # the buffer the write updates in place
    assert warm["decisions"] == cold["decisions"] and warm["decisions"], "the same writes, decided alike"


def test_a_warm_process_loads_what_a_cold_one_compiled_and_computes_the_same(cold):
    project, cold = cold
    assert cold["misses"] == 1 and not loaded(cold)
    assert any(m.startswith("thunder_ext: compiled Net.forward(x: cpu f32[4, 8]) in ") and "saved" in m
               for m in cold["logs"])  # fmt: skip
    assert len(entry_files(project)) == 1
    warm = run(project)  # in a copy of the folder the cold process ran in (``cold``)
    assert (warm["misses"], warm["loads"]) == (1, 1) and loaded(warm), warm["logs"]  # a load counts as a miss
    assert any("in place" in d for d in warm["decisions"])
    fresh = run(project, env=env_of(project, THUNDER_EXT_CACHE="0"))
    assert fresh["misses"] == 1 and not loaded(fresh)
    assert_same_computation(warm, fresh)
    # the decisions name the user's line in the file this process runs, not where the entry was compiled
    assert warm["decisions"][0].startswith(str(project / "model_under_test.py"))
    assert (warm["outs"], warm["seen"]) == (cold["outs"], cold["seen"])


def test_verify_compiles_afresh_and_says_whether_the_stored_entry_is_that_compilation(cold):
    project, cold = cold
    (path,) = entry_files(project)
    verified = run(project, env=env_of(project, THUNDER_EXT_CACHE="verify"))
    assert (verified["misses"], verified["loads"]) == (1, 0) and not loaded(verified)
    assert verified["outs"] == cold["outs"]
    said = [m for m in verified["logs"] if "compile cache verify" in m]
    assert said == ["thunder_ext: compile cache verify: Net.forward(x: cpu f32[4, 8]): the stored entry is this "
                    "compilation"], verified["logs"]  # fmt: skip
    # an entry that runs another program for the call, as a stale key would give (its SCALE, 2.0, taken as 3.0),
    # then one whose text is this compilation's but whose bytecode, which is what runs, is not
    original = store.read(path)[0].payload["programs"]["computation"]["text"]
    stale = original.replace(", 2.0,", ", 3.0,")
    for text in (stale, original):
        _rewritten(path, lambda p: p["programs"]["computation"].update(text=text, code=bytecode(stale)))
        verified = run(project, env=env_of(project, THUNDER_EXT_CACHE="verify"))
        said = [m for m in verified["logs"] if "compile cache verify" in m]
        assert said == [f"thunder_ext: compile cache verify: Net.forward(x: cpu f32[4, 8]): the stored entry {path} "
                        "differs from this compilation in programs.computation"], verified["logs"]  # fmt: skip
        assert entry_files(project) == [path]  # verifying replaces nothing
    # what a load runs is the bytecode: the entry above, loaded, scales by 3.0
    warm = run(project)
    scaled = (torch.tensor(cold["outs"]) * 1.5).tolist()  # in float32, as a*2.0 (exact) times 1.5 rounds as a*3.0
    assert loaded(warm) and warm["outs"] == scaled, (warm["outs"], cold["outs"])


def test_by_default_a_compilation_is_saved_and_loaded_and_opt_in_saves_only_what_asks(cold):
    project, _ = cold
    unset = {k: v for k, v in env_of(project).items() if k != "THUNDER_EXT_CACHE"}
    (project / "cache").rename(project / "other")
    saved = run(project, env=unset)
    assert any("saved to the compile cache" in m for m in saved["logs"]) and len(entry_files(project)) == 1
    default = run(project, env=unset)
    assert loaded(default), default["logs"]
    assert_same_computation(saved, default)
    (project / "cache").rename(project / "third")
    opt_in = {**unset, "THUNDER_EXT_CACHE": "opt-in"}
    unasked = run(project, env=opt_in)
    assert unasked["misses"] == 1 and not loaded(unasked) and not entry_files(project)
    assert not any("compile cache" in m for m in unasked["logs"]), unasked["logs"]
    asked = run(project, env=opt_in, compile_cache=True)
    assert any("saved to the compile cache" in m for m in asked["logs"]) and len(entry_files(project)) == 1
    assert_same_computation(unasked, asked)


def test_the_file_holds_no_tensor_data_only_programs_and_names(cold):
    project, _ = cold
    (path,) = entry_files(project)
    payload = store.read(path)[0].payload
    assert set(payload) == {"key", "describe", "depends_on", "state", "programs", "guard", "decisions",
                            "decision_files", "return_none_instead_of_grads", "autocast"}  # fmt: skip
    assert len(payload["state"]) == 64  # a digest, of no tensor's data (compile_cache/state.py)
    assert payload["autocast"] == [False, False]  # on the CPU and CUDA, as the programs were built
    assert payload["guard"] is None  # thunder_ext.jit prunes no check of the prologue
    assert "def computation(" in payload["programs"]["computation"]["text"] and payload["programs"]["backward"]

    def leaves(value):
        if isinstance(value, dict):
            return [leaf for v in value.values() for leaf in leaves(v)]
        return [leaf for v in value for leaf in leaves(v)] if isinstance(value, list) else [value]

    assert not [v for v in leaves(payload) if isinstance(v, float)], "no number of a tensor's data"
    assert all(isinstance(r, str) for p in payload["programs"].values() if p for r in p["names"].values())


@pytest.mark.parametrize(
    "change",
    ["a parameter's shape", "a parameter's dtype", "the executors", "strict", "the model's code", "a helper's code"],
)
def test_each_part_of_the_key_misses_and_compiles(cold, change):
    # the cache was filled in another folder (``cold``): the model's files are known by their modules, not paths
    project, cold = cold
    options = {"a parameter's shape": {"n": 6}, "a parameter's dtype": {"dtype": "float64"},
               "the executors": {"executors": "torch only"}, "strict": {"strict": True}}.get(change, {})  # fmt: skip
    if change.endswith("code"):  # each output one more than before
        path = project / ("model_under_test.py" if change == "the model's code" else "helper_under_test.py")
        path.write_text(path.read_text().replace("* SCALE", "* SCALE + 1").replace("x.relu()", "x.relu() + 0.5"))
    changed = run(project, **options)
    assert changed["misses"] == 1 and not loaded(changed), changed["logs"]
    if change.endswith("code"):
        assert flat(changed["outs"]) == pytest.approx([v + 1 for v in flat(cold["outs"])])
    if change == "a helper's code":  # a file the trace came from, checked when the entry loads: the entry goes
        assert any(m.endswith("module:helper_under_test changed since it was saved") for m in changed["logs"])
    if change.endswith("code"):  # what the changed code compiled is saved, and loads in turn
        again = run(project, **options)
        assert (again["misses"], again["loads"]) == (1, 1) and loaded(again)
        assert again["outs"] == changed["outs"]


def test_the_plugin_loads_warm_and_its_pruned_checks_still_guard_the_first_call(project):
    # thunder's recipes prune the prologue's checks of the module (PrunePrologueChecks): a loaded entry checks them
    # all on its first call, so a model with another attribute value compiles instead of running the stored entry
    cold = run(project, entry="plugin")
    (path,) = entry_files(project)
    assert store.read(path)[0].payload["guard"] is not None
    warm = run(project, entry="plugin")
    assert (warm["misses"], warm["loads"]) == (1, 1) and loaded(warm)
    assert_same_computation(warm, cold)
    other = run(project, entry="plugin", scale=3.0)
    assert other["misses"] == 1 and not loaded(other)
    assert flat(other["outs"]) == pytest.approx([3 * v for v in flat(cold["outs"])]) and any(flat(cold["outs"]))


def _rewritten(path: Path, change) -> None:
    """``path``'s entry, changed by ``change(payload)``, written back with a valid digest."""
    payload = store.read(path)[0].payload
    change(payload)
    body = json.dumps(payload, sort_keys=True).encode()
    import hashlib

    path.write_bytes(f"thunder_ext compile cache {store.FORMAT} sha256={hashlib.sha256(body).hexdigest()}\n".encode()
                     + body)  # fmt: skip


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "foreign", "another version"])
def test_a_damaged_or_foreign_file_is_ignored_with_a_log_line_and_compiled_again(cold, damage):
    project, cold = cold
    (path,) = entry_files(project)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "corrupt":  # one character of the program changed: the digest no longer matches
        path.write_bytes(data.replace(b"relu", b"tanh", 1))
    elif damage == "foreign":
        path.write_bytes(b"#!/bin/sh\nrm -rf /\n")
    else:
        _rewritten(path, lambda p: p["key"]["versions"].update(thunder="0.0.1"))
    warm = run(project)
    assert warm["misses"] == 1 and not loaded(warm)
    why = {
        "truncated": "does not match its digest",
        "corrupt": "does not match its digest",
        "foreign": "is no entry of this cache format",
        "another version": "saved for another compilation",
    }[damage]
    assert any(m.startswith(f"thunder_ext: compile cache: ignored and removed {path}") and why in m
               for m in warm["logs"])  # fmt: skip
    assert warm["outs"] == cold["outs"]
    (saved,) = entry_files(project)  # the compilation's, whole; the damaged file is gone
    assert store.read(saved)[0] is not None and (saved == path or not path.exists())


def test_two_processes_compiling_the_same_call_at_once_leave_one_whole_entry(project):
    command = [sys.executable, str(project / "runner.py"), "{}"]
    writers = [subprocess.Popen(command, env=env_of(project), stdout=subprocess.PIPE, text=True) for _ in range(2)]
    results = [json.loads(w.communicate(timeout=600)[0].strip().splitlines()[-1]) for w in writers]
    assert all(w.returncode == 0 for w in writers)
    # each compiled it, or loaded it once the other had saved it: one compilation, one entry
    assert all(r["misses"] == 1 for r in results) and [r["loads"] for r in results].count(0) >= 1
    assert results[0]["outs"] == results[1]["outs"]
    (path,) = entry_files(project)
    assert store.read(path)[0] is not None
    assert not list((project / "cache").glob("*/.writing-*")), "no temporary file is left behind"


WRITER = """
from thunder_ext.compile_cache import store
from thunder_ext.compile_cache.loaded_traces import FirstCall, LookError
for _ in range(200):
    store.save("key", {"program": "x" * 200_000})
"""


def test_writers_of_one_entry_at_once_never_let_a_reader_see_part_of_it(tmp_path, monkeypatch):
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    payload = {"program": "x" * 200_000}  # the writers' (large enough that a write takes many system calls)
    path = store.save("key", payload).path
    path.unlink()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER], env=dict(os.environ)) for _ in range(3)]
    reads = 0
    while any(w.poll() is None for w in writers):
        if path.exists():
            stored, why = store.read(path)
            assert stored is not None and stored.payload == payload, why
            reads += 1
    assert all(w.returncode == 0 for w in writers) and reads > 0
    assert [p.name for p in (tmp_path / "key").iterdir()] == [path.name]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="file ownership is a POSIX notion")
@pytest.mark.parametrize("what", ["the cache folder", "the entry"])
def test_nothing_is_loaded_from_where_another_user_may_write(cold, what):
    project, _ = cold
    (path,) = entry_files(project)
    target = project / "cache" if what == "the cache folder" else path
    target.chmod(target.stat().st_mode | stat.S_IWOTH)
    try:
        warm = run(project)
    finally:
        target.chmod(target.stat().st_mode & ~stat.S_IWOTH)
    assert warm["misses"] == 1 and not loaded(warm)
    assert any("may be written by other users" in m for m in warm["logs"])


def test_the_size_limit_removes_the_least_recently_used_entries(cold):
    project, first = cold
    (oldest,) = entry_files(project)
    limit = 1.5 * oldest.stat().st_size / 2**20  # room for one entry, not two
    run(project, n=6, env=env_of(project, THUNDER_EXT_CACHE_MAX_MB=str(limit)))
    assert oldest not in entry_files(project) and len(entry_files(project)) == 1
    again = run(project)  # the entry evicted is compiled again
    assert again["misses"] == 1 and again["outs"] == first["outs"]


def test_off_means_no_file_is_read_or_written(cold):
    project, _ = cold
    off = run(project, env=env_of(project, THUNDER_EXT_CACHE="0"))
    assert off["misses"] == 1 and not loaded(off)
    (project / "cache" / "fresh").mkdir()
    empty = env_of(project, THUNDER_EXT_CACHE="0", THUNDER_EXT_CACHE_DIR=str(project / "cache" / "fresh"))
    run(project, env=empty)
    assert list((project / "cache" / "fresh").iterdir()) == []


@pytest.mark.executor_sets("torch_compile")
def test_what_the_torch_compile_executor_compiled_loads_in_a_warm_process_and_computes_the_same(project, executor_set):
    cold = run(project, executors="torch_compile")
    assert len(entry_files(project)) == 1 and not loaded(cold), cold["logs"]
    warm = run(project, executors="torch_compile")
    assert (warm["misses"], warm["loads"]) == (1, 1) and loaded(warm), warm["logs"]
    assert_same_computation(warm, cold)
    assert all("in a torch.compile region" in d for d in warm["decisions"]), warm["decisions"]


def region_under_test(x):
    return (x * 2).sin() + x.sum()


@pytest.mark.executor_sets("torch_compile")
def test_a_torch_compile_region_is_stored_as_its_text_and_rebuilt_with_torch_compile(executor_set, monkeypatch):
    """An entry stores each region of thunder's torch.compile executor as the program text thunder gives
    torch.compile, with ``fullgraph``; a rebuilt entry gives that text to torch.compile again, which Dynamo compiles
    at its first call (a graph more), and computes what the compiled entry does."""
    from thunder.executors.torch_compile import torch_compile_ex
    from torch._dynamo.utils import counters

    from thunder_ext.thunder026.cache_entries import autocast_now, program_of, rebuilt

    jitted = thunder.jit(region_under_test, executors=[torch_compile_ex, *thunder.get_default_executors()])
    x = torch.randn(3)
    jitted(x)
    computation = thunder.compile_stats(jitted).interpreter_cache[0].computation_fn
    expected = computation(x)
    program = program_of(computation, region_under_test)
    ((name, region),) = program.regions.items()
    assert name == "TorchCompile0" and region.function == "to_be_compiled" and region.fullgraph is True
    assert "torch.sin" in region.text and name not in program.names

    def graphs_compiled_by_a_rebuilt_call() -> int:
        before = counters["stats"]["unique_graphs"]
        torch.testing.assert_close(rebuilt(program, region_under_test, autocast_now())(x), expected)
        return counters["stats"]["unique_graphs"] - before

    assert graphs_compiled_by_a_rebuilt_call() == 1
    # broken on purpose: the region rebuilt as its text alone, run by Python: the same values, and no graph compiled
    monkeypatch.setattr(cache_entries, "_torch_compiled", lambda function, fullgraph: function)
    assert graphs_compiled_by_a_rebuilt_call() == 0


HF_RUNNER = '''
import json, logging, sys
import torch, thunder, thunder_ext
from transformers import LlamaConfig, LlamaForCausalLM

logs = []
handler = logging.Handler()
handler.emit = lambda record: logs.append(record.getMessage())
logging.getLogger("thunder_ext").addHandler(handler)
logging.getLogger("thunder_ext").setLevel(logging.INFO)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, max_position_embeddings=64)
model = thunder.compile(LlamaForCausalLM(config).eval(), recipe=thunder_ext.HFTransformersRecipe(), plugins="inplace")
tokens = model.generate(torch.arange(1, 6)[None], max_new_tokens=3, do_sample=False)
print(json.dumps({"tokens": tokens.tolist(), "logs": logs}))
'''


def test_hf_transformers_recipe_compilations_load_in_a_warm_process_and_generate_the_same_tokens(project):
    """Under the extension's HF recipe (thunder's torch.compile executor, HF's model outputs, whose dataclass methods
    Python generates, and a ``GenerationConfig`` that keeps a hash Python seeds per process), a warm process loads the
    prefill and the decode step a cold one compiled, and generates the same tokens."""
    pytest.importorskip("transformers")
    (project / "hf_runner.py").write_text(HF_RUNNER)
    cold = run(project, "hf_runner.py")
    saved = [m for m in cold["logs"] if m.startswith("thunder_ext: compiled LlamaForCausalLM.forward(")]
    assert len(saved) == 2 and all("saved to the compile cache" in m for m in saved), cold["logs"]
    warm = run(project, "hf_runner.py")
    assert warm["tokens"] == cold["tokens"]
    assert sum(m.startswith("thunder_ext: loaded LlamaForCausalLM.forward(") for m in warm["logs"]) == 2, warm["logs"]
    assert not any(m.startswith("thunder_ext: compiled LlamaForCausalLM") for m in warm["logs"]), warm["logs"]


def test_an_attribute_python_seeds_per_process_is_left_out_of_the_state_not_a_changed_one(monkeypatch):
    transformers = pytest.importorskip("transformers")
    from thunder_ext.compile_cache.state import state_digest
    from thunder_ext.hooks import HOOKS

    config = transformers.GenerationConfig.from_model_config(transformers.LlamaConfig())  # keeps hash(), as a model's
    config.max_new_tokens = 4
    before = state_digest(config)
    config._original_object_hash += 1  # as another process's hash seed gives it
    assert state_digest(config) == before
    config.max_new_tokens = 5
    assert state_digest(config) != before
    # broken on purpose: without the HF integration's hook, the seeded hash is part of the state
    monkeypatch.setattr(HOOKS, "state_seeded", [])
    config.max_new_tokens = 4
    assert state_digest(config) != before


GROWING = '''
import json, logging, os, sys
import torch, thunder, thunder_ext
import litgpt

logs = []
handler = logging.Handler()
handler.emit = lambda record: logs.append(record.getMessage())
logging.getLogger("thunder_ext").addHandler(handler)
config = litgpt.Config(block_size=64, vocab_size=64, padded_vocab_size=64, n_layer=1, n_head=4, n_embd=32,
                       n_query_groups=4, rotary_percentage=1.0, bias=False, norm_class_name="RMSNorm",
                       mlp_class_name="LLaMAMLP", intermediate_size=64)
torch.manual_seed(0)
model = thunder_ext.jit(litgpt.GPT(config).eval(), strict=True)
# each bucket compiled in this process, as it is reached (test_compile_ahead.py has the second process's)
thunder_ext.set_kv_cache(model, batch_size=1, min_capacity=4, compile_ahead=False)
tokens, position = [3, 1, 4], 3
with torch.inference_mode():
    logits = model(torch.tensor([tokens]), torch.arange(3))
    for _ in range(10):  # buckets of 4, 8 and 16 positions
        tokens.append(int(logits[0, -1].argmax()))
        logits = model(torch.tensor([[tokens[-1]]]), torch.tensor([position]))
        position += 1
k = model._model.transformer.h[0].attn.kv_cache.k
print(json.dumps({"tokens": tokens, "k": k.tolist(), "logs": logs}))
'''


def test_a_growing_cache_loads_every_bucket_and_growth_copy_warm(project):
    pytest.importorskip("litgpt")
    (project / "growing.py").write_text(GROWING)
    cold = run(project, "growing.py")
    compiled = [m for m in cold["logs"] if m.startswith("thunder_ext: compiled") and "saved" in m]
    # one-token calls (the prompt's too, in chunks of one at this capacity) at 4; a growth copy and a call at 8, 16
    assert len(compiled) == 5, cold["logs"]
    warm = run(project, "growing.py")
    assert warm["tokens"] == cold["tokens"] and warm["k"] == cold["k"]
    assert not any(m.startswith("thunder_ext: compiled") for m in warm["logs"]), warm["logs"]
    assert sum(m.startswith("thunder_ext: loaded") and "for " in m for m in warm["logs"]) == 5  # the buckets' logs
    assert any("loaded the growth copy for a KV cache of 16 positions from the compile cache" in m for m in warm["logs"])


AUTOCAST = """
import json, os, sys
import torch, thunder_ext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_under_test import Net

jitted = thunder_ext.jit(Net())
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = jitted(torch.randn(4, 8))
    after = torch.is_autocast_enabled("cpu")
    eager = torch.nn.functional.linear(torch.randn(2, 8), torch.randn(3, 8))
print(json.dumps({"out": str(out.dtype), "on after": after, "eager after": str(eager.dtype),
                  "loads": thunder_ext.cache_loads(jitted)}))
"""


def test_a_loaded_entry_leaves_the_callers_autocast_as_it_was(project):
    # thunder's programs restore, after each call, the autocast of when they were built: a program loaded outside
    # the user's autocast switched it off for the code after the call (eager then ran in float32)
    (project / "autocast.py").write_text(AUTOCAST)
    cold, warm = run(project, "autocast.py"), run(project, "autocast.py")
    assert (cold["loads"], warm["loads"]) == (0, 1)
    for result in (cold, warm):
        assert result["on after"] and result["eager after"] == "torch.bfloat16" == result["out"], result


def test_a_loaded_entry_shows_the_traces_counters_and_decisions_a_cold_compilation_shows(cold):
    project, _ = cold
    fresh = run(project, env=env_of(project, THUNDER_EXT_CACHE="0"), look=True)
    warm = run(project, look=True)
    assert warm["loads"] == 1 and loaded(warm), warm["logs"]
    # every trace of the prologue, the computation and the backward (the Linear's parameters require grad)
    assert warm["looked"] == fresh["looked"] and all(warm["looked"].values()), warm["looked"]
    assert any(m.startswith("thunder_ext: Net.forward(x: cpu f32[4, 8]) was loaded from the compile cache") and
               "compiled it afresh to show them" in m for m in warm["logs"])  # fmt: skip
    assert (warm["misses"], warm["hits"]) == (fresh["misses"], fresh["hits"]) == (1, 1)
    assert warm["decisions"] == fresh["decisions"]
    assert_same_computation(warm, fresh)  # looking ran nothing: the buffer holds the two calls' writes


def test_a_first_call_kept_for_its_traces_gives_its_own_tensors_back_or_tensors_of_their_description():
    class Holder:  # an argument of the user's: kept weakly
        pass

    base, holder = torch.arange(8.0), Holder()
    a, b, w = base[1:4], base[2:].view(2, 3), torch.nn.Parameter(torch.ones(2))
    with torch.no_grad():
        call = FirstCall((a, [b, 3]), {"w": w, "holder": holder})
    (a1, (b1, three)), kw = call.arguments()
    assert (a1, b1, three, kw["w"], kw["holder"]) == (a, b, 3, w, holder) and a1 is a and b1 is b
    with call.settings():
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()
    b.resize_(6)  # no longer as it was: every tensor is made anew, shared as they were
    (a2, (b2, _)), kw = call.arguments()
    assert a2 is not a and (a2.shape, a2.stride(), a2.storage_offset()) == ((3,), (1,), 1)
    assert (b2.shape, b2.stride(), b2.storage_offset()) == ((2, 3), (3, 1), 2)
    assert a2.untyped_storage().data_ptr() == b2.untyped_storage().data_ptr() and a2.untyped_storage().nbytes() == 32
    assert isinstance(kw["w"], torch.nn.Parameter) and kw["w"] is not w and kw["w"].requires_grad
    del holder, kw
    with pytest.raises(LookError, match="its first call's .*Holder argument is gone"):
        call.arguments()


# the store's rules, in this process: no compilation needed


def test_a_transform_neither_thunders_nor_keyed_makes_a_compilation_not_storable():
    import thunder
    from thunder.core.transforms import Transform

    import thunder_ext
    from thunder_ext.compile_cache.key import key_of
    from thunder_ext.thunder026.cache_entries import NotStorable

    class Counting(Transform):  # its work while compiling would not be done for an entry loaded instead
        def transform_traces_pre_prologue(self, pro, comp, epi, **kwargs):
            return pro, comp, epi

    class Keyed(Counting):
        def compile_cache_key(self) -> dict:
            return {}

    def compile_data(transform):
        return thunder.compile_data(thunder_ext.jit(lambda x: x.add_(1), transforms=[transform]))

    with pytest.raises(NotStorable, match="transform .*Counting is not thunder's and has no compile_cache_key"):
        key_of(compile_data(Counting()))
    assert key_of(compile_data(Keyed()))[1]["transforms"][0][0].endswith("Keyed")
    # thunder's own, by its attributes: HF's recipe's transform by the executor and operator it makes for itself
    from thunder.recipes.hf_transformers import InplaceIndexCopyTransform

    name, options = key_of(compile_data(InplaceIndexCopyTransform()))[1]["transforms"][0]
    assert name == "thunder.recipes.hf_transformers:InplaceIndexCopyTransform"
    assert options == {"executor": "executor inplace_index_copy_ex None",
                       "inplace_index_copy": "operator inplace_index_copy of inplace_index_copy_ex"}  # fmt: skip


def test_the_extensions_own_modules_are_named_in_the_state_not_walked(monkeypatch):
    import re

    import thunder_ext
    from thunder_ext.compile_cache.state import state_digest

    def compiled(x):  # names the extension, which is often installed editable, outside site-packages
        return thunder_ext.inplace_decisions

    before = state_digest(compiled)
    monkeypatch.setattr(thunder_ext, "probe", re.compile("a pattern: no state the digest could name"), raising=False)
    assert state_digest(compiled) == before


def test_a_saved_entry_reads_back_whole_and_any_changed_byte_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    saved = store.save("k", {"a": [1, 2]})
    assert store.read(saved.path)[0].payload == {"a": [1, 2]}
    assert stat.S_IMODE(saved.path.stat().st_mode) == 0o600 and stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o700
    data = saved.path.read_bytes()
    for broken in (data[:-1], data.replace(b"[1, 2]", b"[3, 2]"), b"", data.replace(f"cache {store.FORMAT} ".encode(), f"cache {store.FORMAT + 1} ".encode())):
        saved.path.write_bytes(broken)
        assert store.read(saved.path)[0] is None


def test_eviction_goes_by_last_use(tmp_path, monkeypatch):
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    paths = [store.save(f"k{i}", {"i": i, "pad": "x" * 1000}).path for i in range(3)]
    for age, path in zip((300, 100, 200), paths):  # the first saved is the least recently used ...
        os.utime(path, (0, path.stat().st_mtime - age))
    store.mark_used(paths[0])  # ... until it is used
    assert store.evict(limit=2 * paths[0].stat().st_size) == [paths[2]]
    assert store.evict(limit=0) == [paths[1], paths[0]]


def test_the_folder_follows_the_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("THUNDER_EXT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert store.folder() == tmp_path / "xdg" / "thunder_ext"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert store.folder() == Path.home() / ".cache" / "thunder_ext"
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path / "mine"))
    assert store.folder() == tmp_path / "mine"


def test_the_cache_is_on_unless_said_off_and_thunder_ext_cache_0_wins(monkeypatch):
    monkeypatch.delenv("THUNDER_EXT_CACHE", raising=False)
    assert [store.enabled(asked) for asked in (None, True, False)] == [True, True, False]
    monkeypatch.setenv("THUNDER_EXT_CACHE", "opt-in")
    assert [store.enabled(asked) for asked in (None, True, False)] == [False, True, False]
    for on in ("1", "on", "True"):
        monkeypatch.setenv("THUNDER_EXT_CACHE", on)
        assert (store.enabled(), store.enabled(True), store.enabled(False)) == (True, True, False)
    for off in ("0", "off", "False"):
        monkeypatch.setenv("THUNDER_EXT_CACHE", off)
        assert (store.enabled(), store.enabled(True)) == (False, False)
    monkeypatch.setenv("THUNDER_EXT_CACHE", "lots")
    settings = "1 \\(on, the default\\), 0 \\(off\\), opt-in or verify"
    with pytest.raises(ValueError, match=f"THUNDER_EXT_CACHE must be {settings}, got 'lots'"):
        store.enabled()


def test_the_cache_size_setting_must_be_a_number(monkeypatch):
    monkeypatch.setenv("THUNDER_EXT_CACHE_MAX_MB", "lots")
    with pytest.raises(ValueError, match="THUNDER_EXT_CACHE_MAX_MB must be a number of megabytes, got 'lots'"):
        store.max_bytes()


def test_the_command_lists_the_entries_and_clears_them(tmp_path, monkeypatch, capsys):
    from thunder_ext.tools import cache

    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("THUNDER_EXT_CACHE", "1")
    store.save("k1", {"describe": "Net.forward(x: cpu f32[4, 8])", "pad": "x" * 3000})
    store.save("k2", {"describe": "GPT.forward(idx: cpu i64[1, 1], input_pos: cpu i64[1], 128)"})
    cache.main([])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"compile cache: {tmp_path}, on (THUNDER_EXT_CACHE=1); 2 entries, 0.0 MB of at most 1024")
    assert [line.split("  ")[1] for line in out[1:]] == ["GPT.forward(idx: cpu i64[1, 1], input_pos: cpu i64[1], 128)",
                                                         "Net.forward(x: cpu f32[4, 8])"]  # fmt: skip
    assert "MB, used 0 s ago" in out[1]
    cache.main(["clear"])
    assert capsys.readouterr().out == f"removed 2 entries from {tmp_path}\n"
    assert store.every_entry() == [] and list(tmp_path.iterdir()) == []


# The Python state a compilation read (``compile_cache/state.py``): for each case, process A compiles one object
# and saves it; process B, over the same folder, compiles an object that differs from A's in one value the traced
# code read and that thunder's prologue does not check. B must give eager's output (a load would run A's program);
# "same" differs in nothing, and must load.
STATE_RUNNER = '''
import functools, json, logging, os, sys
import torch, thunder_ext
import litgpt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import values_under_test

B = json.loads(sys.argv[1])["mode"] == "B"
K = 3.0 if B else 2.0


def with_default(x, k=K):  # a default computed at import
    return x * k


def times_a_value(x):  # a number returned by a helper module's function
    return x * values_under_test.value()


lam_a = lambda x: x + 1  # noqa: E731  two lambdas of one file
lam_b = lambda x: x * 2  # noqa: E731


def factory(fn):
    def closed(x):
        return fn(x) * 2
    return closed


def mul(x, k):
    return x * k


def sub(x, k):
    return x - k


class WithFn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.lin, self.fn = torch.nn.Linear(4, 4), fn

    def forward(self, x):
        return self.fn(self.lin(x))


def gpt(**kw):
    config = litgpt.Config(block_size=16, vocab_size=32, padded_vocab_size=32, n_layer=kw.pop("n_layer", 1), n_head=2,
                           n_embd=16, n_query_groups=1, **kw)
    return litgpt.GPT(config)


def step(ps, gs):
    for p, g in zip(ps, gs):
        p.add_(g, alpha=-0.1)
    return ps[0] * 1


def hooked():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4))
    if B:
        m.register_forward_hook(lambda module, args, out: out * 2)
    return m


CASES = {
    "litgpt depth": lambda: (gpt(n_layer=2 if B else 1), torch.tensor([[1, 2, 3]])),
    "litgpt softcapping": lambda: (gpt(attention_logit_softcapping=2.0 if B else None), torch.tensor([[1, 2, 3]])),
    "litgpt final softcapping": lambda: (gpt(final_logit_softcapping=1.0 if B else None), torch.tensor([[1, 2, 3]])),
    "a default": lambda: (with_default, torch.ones(4)),
    "a helper's number": lambda: (times_a_value, torch.ones(4)),
    "a lambda": lambda: (lam_b if B else lam_a, torch.ones(4)),
    "a closure's cell": lambda: (factory(torch.tanh if B else torch.relu), torch.randn(4)),
    "a partial's function": lambda: (functools.partial(sub if B else mul, k=2.0), torch.ones(4)),
    "an activation": lambda: (torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid() if B else torch.nn.Tanh()),
                              torch.randn(2, 4)),
    "a function attribute": lambda: (WithFn(torch.sigmoid if B else torch.relu), torch.randn(2, 4)),
    "a hook": lambda: (hooked(), torch.randn(2, 4)),
    "a list's length": lambda: (step, [[torch.ones(3) for _ in range(4 if B else 2)], [torch.ones(3)] * (4 if B else 2)]),
    "same": lambda: (torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()), torch.randn(2, 4)),
}

logs = []
handler = logging.Handler()
handler.emit = lambda record: logs.append(record.getMessage())
logging.getLogger("thunder_ext").addHandler(handler)
report = {}
for name, make in CASES.items():
    torch.manual_seed(0)
    fn, x = make()
    args = x if isinstance(x, list) else [x]
    copies = [[[t.clone() for t in a] if isinstance(a, list) else a.clone() for a in args] for _ in range(2)]
    with torch.no_grad():
        want = fn(*copies[0])
        jitted = thunder_ext.jit(fn, compile_cache=True)
        del logs[:]
        got = jitted(*copies[1])
    report[name] = {"equal": bool(torch.allclose(got, want)) and str(copies[0]) == str(copies[1]),
                    "loads": thunder_ext.cache_loads(jitted), "saved": any("saved to the compile cache" in m for m in logs),
                    "logs": list(logs)}
print(json.dumps(report))
'''


def test_an_entry_runs_only_for_an_object_whose_python_state_is_the_one_it_compiled_for(project):
    (project / "state_runner.py").write_text(STATE_RUNNER)
    values = project / "values_under_test.py"
    values.write_text("def value():\n    return 2.0\n")
    a = run(project, "state_runner.py", mode="A")
    # an object of A equal to an earlier one loads its entry (the litgpt cases but depth; "same" and "an activation")
    assert all(r["equal"] and (r["saved"] or r["loads"]) for r in a.values()), a
    values.write_text("def value():\n    return 3.0\n")
    b = run(project, "state_runner.py", mode="B")
    wrong = {name: r["logs"] for name, r in b.items() if not r["equal"]}
    assert not wrong, wrong  # each would have run A's program
    assert b["same"]["loads"] == 1, b["same"]["logs"]
    assert not [name for name, r in b.items() if r["loads"] and name != "same"]


# torch's hooks for every module are globals of a library: the state's digest does not name them, a prologue check does
GLOBAL_HOOK_RUNNER = '''
import json, sys
import torch, thunder_ext

if json.loads(sys.argv[1])["hooked"]:
    # clamping twice is clamping once: the ThunderModule's own call runs the hook again on what the traced modules give
    torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: out.clamp(max=0.1))
torch.manual_seed(0)
model, x = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()), torch.randn(2, 4)
jitted = thunder_ext.jit(model)
with torch.no_grad():
    got, want = jitted(x), model(x)
print(json.dumps({"equal": bool(torch.allclose(got, want)), "loads": thunder_ext.cache_loads(jitted)}))
'''


def test_a_hook_for_every_module_makes_an_entry_saved_without_it_miss_in_another_process(project):
    (project / "global_hook_runner.py").write_text(GLOBAL_HOOK_RUNNER)
    assert run(project, "global_hook_runner.py", hooked=False) == {"equal": True, "loads": 0}
    # a load would run the program traced without the hook
    assert run(project, "global_hook_runner.py", hooked=True) == {"equal": True, "loads": 0}
    assert run(project, "global_hook_runner.py", hooked=False) == {"equal": True, "loads": 1}
