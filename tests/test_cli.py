"""The command line as a new user meets it: help texts, file writes, missing extras, progress, warnings.

The benchmark runs here use a stand-in case (no model, no compile): what is tested is the suite's
machinery, not timings.
"""

import functools
import gc
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import thunder
import thunder.core.interpreter as interpreter
import torch
import torch._dynamo.mutation_guard as mutation_guard
from thunder.core.interpreter import InterpreterError

from thunder_ext.tools import cli, extras
from thunder_ext.benchmarks import compile_time, suite
from thunder_ext.benchmarks.measure import interleaved_samples, report_status
from thunder_ext.benchmarks.report import Table, Target
from thunder_ext.tools.demo import main as demo_main
from thunder_ext.tools.demo import summary


@pytest.fixture
def stand_in_case(monkeypatch, tmp_path):
    """The suite with one instant case, run from an empty folder (as if it were the repository root)."""
    case = SimpleNamespace(
        configs=lambda quick: [1],
        measure=lambda config, device, quick: 1.0,
        report=lambda results: Table("stand_in", "Stand-in", "", ["x"], [["1"]], targets=[Target("t", "1", True)]),
    )
    monkeypatch.setattr(suite, "CASES", {"stand_in": case})
    repo, temporary = tmp_path / "repo", tmp_path / "tmp"
    repo.mkdir(), temporary.mkdir()
    monkeypatch.chdir(repo)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # where a quick run's folder goes
    return repo


def test_a_quick_run_leaves_the_recorded_results_alone(stand_in_case, capsys):
    suite.main(["--quick", "--cases", "stand_in"])
    assert not (stand_in_case / "docs").exists()
    written = Path(capsys.readouterr().out.split("writing into ")[1].split("\n")[0])
    assert written.parent == stand_in_case.parent / "tmp"
    assert (written / "stand_in.md").exists() and (written / "targets.json").exists()


def test_a_run_writes_where_it_is_told(stand_in_case):
    suite.main(["--quick", "--cases", "stand_in", "--out", "docs/benchmarks"])
    assert (stand_in_case / "docs" / "benchmarks" / "targets.json").exists()


def test_a_missing_extra_stops_the_run_before_anything_is_written(stand_in_case, monkeypatch):
    real = extras.importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec", lambda name: None if name == "matplotlib" else real(name))
    with pytest.raises(SystemExit, match=r'needs matplotlib.*pip install -c constraints.txt -e "\.\[bench\]"'):
        suite.main(["--cases", "stand_in", "--out", "out"])
    assert list(stand_in_case.iterdir()) == []


def test_the_top_level_help_says_what_each_command_does_and_how_long(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "`" not in out and "each command takes --help." in out
    for command in ("demo", "bench"):
        assert f"    {command} " in out
    assert out.count("minutes") >= 2


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_each_command_help_names_the_command(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert out.startswith(f"usage: thunder-ext {command} ") and "minutes" in out


@pytest.mark.executor_sets("defaults")  # compiles nothing
def test_python_dash_m_runs_the_command_line():
    done = subprocess.run([sys.executable, "-m", "thunder_ext.tools.cli", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: thunder-ext ") and all(f"    {c} " in done.stdout for c in ("demo", "bench"))


def test_importing_the_project_hides_thunders_transformer_engine_warning_only():
    code = "import thunder_ext, warnings; warnings.warn('a warning of the user')"
    err = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True).stderr
    assert "transformer_engine" not in err and "a warning of the user" in err


def test_the_suite_says_which_runner_it_compiles_and_times():
    seen = []
    with report_status(seen.append):
        interleaved_samples({"a": lambda: None, "b": lambda: None}, torch.device("cpu"), warmup=1, repeat=2, rounds=1)
    assert seen[:2] == ["compiling a", "compiling b"]
    assert "timing a, 0 of 2 calls" in seen and "timing b, 0 of 2 calls" in seen


def test_runners_take_turns_in_blocks():
    order = []
    calls = {name: (lambda name=name: order.append(name)) for name in ("a", "b")}
    interleaved_samples(calls, torch.device("cpu"), warmup=0, repeat=4, rounds=2)
    # each block: one untimed call, then repeat // rounds timed ones
    assert "".join(order) == "aaabbbaaabbb"


def test_the_demo_says_when_the_spread_is_too_wide_to_conclude():
    clear = summary({"eager": [1.0, 1.1, 1.0, 0.9], "thunder_ext.jit": [2.0, 2.1, 2.0, 1.9]})
    noisy = summary({"eager": [1.0, 2.0, 1.5, 1.2], "thunder_ext.jit": [1.1, 1.9, 1.4, 1.3]})
    assert "quartiles" in clear[1] and "too noisy" not in clear[1]
    assert "too noisy to conclude" in noisy[1]


def test_the_demo_gives_the_extension_both_ratios_with_their_spread_even_when_noisy():
    *_, ext = summary({"eager": [1.0, 1.1, 1.0, 0.9], "thunder.jit": [1.0, 2.0, 1.5, 1.2], "thunder_ext.jit": [1.1, 1.9, 1.4, 1.3]})
    assert "; 1.35x eager (1.22-1.56); 1.00x thunder.jit (0.77-1.33, spreads overlap: too noisy to conclude)" in ext


@pytest.fixture
def dynamo_registry_with_garbage(monkeypatch):
    """The compile-time crash's setting, its collection forced instead of left to chance: torch.compile has
    patched nn.Module.__init__ to record modules in Dynamo's registry, the registry holds modules that only
    a collection frees (automatic collection is off until then), and one comes as thunder walks the registry."""
    mutation_guard.install_generation_tagging_init()  # what any torch.compile call does
    registry = mutation_guard.GenerationTracker.generation_values.values
    enabled = gc.isenabled()
    gc.disable()
    for _ in range(20):
        m = torch.nn.Identity()
        m.__dict__["cycle"] = m
    del m
    wrap_item = interpreter.wrap_binary_subscr

    def wrap_item_collecting(value, obj, key):
        if obj.value is registry:
            gc.collect()  # the collection that, in the suite, came at a random allocation of the walk
        return wrap_item(value, obj, key)

    monkeypatch.setattr(interpreter, "wrap_binary_subscr", wrap_item_collecting)
    yield
    if enabled:
        gc.enable()


class BuildsAModule(torch.nn.Module):
    def forward(self, x):
        return torch.nn.Identity()(x)  # as litgpt's GPT.forward does on every call


def test_the_crash_reproduces_where_a_collection_comes_during_the_walk(dynamo_registry_with_garbage):
    with pytest.raises(InterpreterError, match="dictionary changed size during iteration"):
        thunder.jit(BuildsAModule())(torch.ones(2))


@pytest.mark.executor_sets("defaults")  # CI time: a collection during thunder's interpreter walk, whatever executes
def test_the_suite_compiles_with_no_collection_during_the_walk(dynamo_registry_with_garbage):
    jitted = thunder.jit(BuildsAModule())
    # it must not raise: the first call, which compiles, runs after a collection, with none during it
    interleaved_samples({"thunder.jit": lambda: jitted(torch.ones(2))}, torch.device("cpu"), warmup=1, repeat=1)


def test_the_compile_time_case_runs_in_a_process_without_dynamos_patch():
    mutation_guard.install_generation_tagging_init()
    needs_patch = functools.partial(getattr, torch.nn.Module, "___needs_generation_tag_patch", True)
    assert not needs_patch() and compile_time.in_fresh_process(needs_patch)


def test_the_demo_names_its_extra_when_litgpt_is_missing(monkeypatch):
    real = extras.importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec", lambda name: None if name == "litgpt" else real(name))
    with pytest.raises(SystemExit, match=r'thunder-ext demo needs litgpt.*-e "\.\[demo\]"'):
        demo_main([])
