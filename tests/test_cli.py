"""The command line as a new user meets it: help texts, file writes, missing extras, progress, warnings.

The benchmark runs here use a stand-in case (no model, no compile): what is tested is the suite's
machinery, not timings.
"""

import functools
import gc
import logging
import os
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

import thunder_ext.logs
import thunder_ext_cli
from thunder_ext.tools import cache, extras
from thunder_ext.benchmarks import compile_time, suite
from thunder_ext.benchmarks.measure import interleaved_samples, report_status
from thunder_ext.benchmarks.report import Table, Target
from thunder_ext.compile_cache import store
from thunder_ext.tools.demo import PROMPT_TOKENS, ROUNDS, TOKENS, Decoder, positions_needed, summary
from thunder_ext.tools.demo import main as demo_main
from thunder_ext.tools.demo_model import small_model
from thunder_ext.tools.timing import timed_blocks


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
        thunder_ext_cli.main(["--help"])
    out = capsys.readouterr().out
    assert "`" not in out and "each command takes --help." in out
    for command in ("demo", "bench"):
        assert f"    {command} " in out
    assert out.count("minutes") >= 2


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_each_command_help_names_the_command(command, capsys):
    with pytest.raises(SystemExit):
        thunder_ext_cli.main([command, "--help"])
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


# what a command line that answers at once may import: --help and each usage error come before torch
HELP_AND_USAGE_ERRORS = [["--help"], ["--bogus"], ["demo", "--help"], ["demo", "--bogus"], ["bench", "--help"],
                         ["bench", "--cases", "nope"], ["bench", "--threads", "many"], ["cache", "--help"],
                         ["cache", "empty"]]  # fmt: skip


@pytest.mark.executor_sets("defaults")  # compiles nothing
def test_help_and_usage_errors_answer_without_importing_torch():
    code = (
        "import sys, thunder_ext_cli\n"
        f"for argv in {HELP_AND_USAGE_ERRORS!r}:\n"
        "    try:\n"
        "        thunder_ext_cli.main(argv)\n"
        "    except SystemExit as e:\n"
        "        print(argv, e.code, file=sys.stderr)\n"
        "print(sorted(m for m in ('torch', 'thunder', 'thunder_ext', 'litgpt') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]" and "usage: thunder-ext bench " in done.stdout
    codes = [line.rsplit(" ", 1)[1] for line in done.stderr.splitlines() if line.startswith("[")]
    assert codes == ["0", "2", "0", "2", "0", "2", "2", "0", "2"], done.stderr


def test_the_installed_command_runs_the_module_outside_the_package():
    import importlib.metadata

    (script,) = importlib.metadata.entry_points(group="console_scripts", name="thunder-ext")
    assert script.value == "thunder_ext_cli:main"  # else: .venv/bin/pip install -e . again
    assert Path(thunder_ext_cli.__file__) == Path(__file__).parents[1] / "thunder_ext_cli.py"


def test_the_command_line_offers_the_cases_the_suite_runs():
    assert list(thunder_ext_cli.BENCH_CASES) == list(suite.CASES)


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
    assert ("; 1.35x slower than eager (1.22-1.56); 1.00x faster than thunder.jit (0.75-1.30, spreads overlap: too "
            "noisy to conclude)") in ext  # fmt: skip


def test_the_demo_says_which_runner_is_faster_with_the_spread_of_that_ratio():
    _, ext = summary({"thunder.jit": [2.0, 2.1, 2.0, 1.9], "thunder_ext.jit": [1.0, 1.1, 1.0, 0.9]})
    assert ext.endswith("; 2.00x faster than thunder.jit (1.93-2.08)")  # quartiles 1.975-2.025 over 0.975-1.025


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


# a user's errors: one line and exit status 2, before anything compiles


def cli_run(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The command line in a process of its own, as a user runs it. An error comes before anything compiles (its
    one line and exit status say so); 60 s bounds a process that would not stop: importing torch and thunder alone
    took 5.6 s on the quiet 2-core VM, and over 10 s with two more processes compiling beside it (2026-12-07)."""
    command = [sys.executable, "-m", "thunder_ext_cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, **env})


def stderr_lines(done: subprocess.CompletedProcess) -> list[str]:
    # none of torch's: `import thunder_ext` hides "No CUDA runtime is found" (thunder_ext.logs.cuda_home_hidden)
    return done.stderr.splitlines()


@pytest.fixture
def shared_folder(tmp_path):
    """A folder every user may write into, as the compile cache's folder."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    return shared


@pytest.mark.executor_sets("defaults")  # compiles nothing
@pytest.mark.parametrize("args, error", [
    (["--max-seq-length", "16"], "--max-seq-length 16: at least 24 with --tokens 12 (the 8-token prompt, the first "
                                 "decoded token, and 15 calls timed in turns)"),
    (["--tokens", "1"], "--tokens 1: at least 2, for the median and quartiles of the time per token"),
])  # fmt: skip
def test_a_wrong_demo_value_is_one_line_with_exit_status_2(args, error):
    done = cli_run("demo", *args)
    assert (done.returncode, stderr_lines(done), done.stdout) == (2, [f"thunder-ext demo: error: {error}"], "")
    assert "Traceback" not in done.stderr


@pytest.mark.executor_sets("defaults")
def test_a_device_the_benchmarks_cannot_use_is_one_line_with_exit_status_2():
    done = cli_run("bench", "--device", "tpu")
    error = "thunder-ext bench: error: --device tpu: the benchmarks run on cpu or cuda (cuda:N for one GPU of several)"
    assert (done.returncode, stderr_lines(done)) == (2, [error]) and "Traceback" not in done.stderr


@pytest.mark.executor_sets("defaults")
@pytest.mark.parametrize("name, value, error", [
    ("THUNDER_EXT_CACHE_MAX_MB", "lots", "THUNDER_EXT_CACHE_MAX_MB must be a number of megabytes, 0 or more, got "
                                         "'lots' (unset: 1024)"),
    ("THUNDER_EXT_CACHE", "maybe",
     "THUNDER_EXT_CACHE must be 1 (on, the default), 0 (off), opt-in or verify, got 'maybe'"),
])  # fmt: skip
def test_a_wrong_cache_setting_is_one_line_with_exit_status_2(name, value, error):
    done = cli_run("cache", **{name: value})
    assert (done.returncode, stderr_lines(done)) == (2, [f"thunder-ext cache: error: {error}"])
    assert "Traceback" not in done.stderr


@pytest.mark.executor_sets("defaults")
def test_the_cache_command_says_a_folder_others_may_write_leaves_the_cache_off_and_how_to_fix_it(shared_folder):
    refused = (f"not using {shared_folder}: it may be written by other users; chmod 700 {shared_folder}, or set "
               "THUNDER_EXT_CACHE_DIR to a folder of your own")
    done = cli_run("cache", THUNDER_EXT_CACHE="1", THUNDER_EXT_CACHE_DIR=str(shared_folder))
    assert done.returncode == 0 and stderr_lines(done) == [], done.stderr
    assert done.stdout == f"compile cache: off: {refused}\n"
    done = cli_run("cache", "clear", THUNDER_EXT_CACHE_DIR=str(shared_folder))
    assert done.returncode == 2 and stderr_lines(done) == [f"thunder-ext cache: error: nothing removed: {refused}"]
    assert list(shared_folder.iterdir()) == []


@pytest.mark.executor_sets("defaults")
@pytest.mark.parametrize("setting", ["1", ""])  # "": as by default
def test_the_demo_with_the_cache_on_in_a_folder_others_may_write_stops_before_compiling(shared_folder, setting):
    done = cli_run("demo", THUNDER_EXT_CACHE=setting, THUNDER_EXT_CACHE_DIR=str(shared_folder))
    assert done.returncode == 2 and stderr_lines(done) == [
        f"thunder-ext demo: error: the compile cache (on) would be off: not using {shared_folder}: it may be written "
        f"by other users; chmod 700 {shared_folder}, or set THUNDER_EXT_CACHE_DIR to a folder of your own, or "
        "THUNDER_EXT_CACHE=0 to turn the cache off"
    ]  # fmt: skip
    assert list(shared_folder.iterdir()) == []


@pytest.mark.executor_sets("defaults")  # compiles nothing
def test_a_refused_cache_folder_is_logged_once_with_its_fix_and_nothing_is_made_in_it(shared_folder, monkeypatch,
                                                                                     caplog):  # fmt: skip
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(shared_folder))
    for _ in range(2):  # a compilation looks at the folder when it loads and when it saves
        assert list(store.entries("k")) == [] and store.save("k", {"a": 1}) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"thunder_ext: compile cache: not using {shared_folder}: it may be written by other users; chmod 700 "
        f"{shared_folder}, or set THUNDER_EXT_CACHE_DIR to a folder of your own"
    ]  # fmt: skip
    assert list(shared_folder.iterdir()) == []
    (shared_folder / "k").mkdir()
    (shared_folder / "k" / "someone's.entry").write_text("")
    assert store.clear() == 0 and (shared_folder / "k" / "someone's.entry").exists()  # another user's, maybe


@pytest.mark.executor_sets("defaults")  # compiles nothing
def test_a_folder_shared_on_purpose_as_tmp_is_gets_no_advice_to_chmod_it(shared_folder, monkeypatch):
    shared_folder.chmod(0o1777)  # the sticky bit: each user's files are their own
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(shared_folder))
    assert store.refusal() == (f"not using {shared_folder}: it may be written by other users; set "
                               f"THUNDER_EXT_CACHE_DIR to a folder of your own, such as {shared_folder}/thunder_ext")


@pytest.mark.executor_sets("defaults")  # compiles nothing
def test_listing_the_cache_names_a_damaged_entry_and_removes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    whole, damaged = store.save("k1", {"describe": "Net.forward(x)"}), store.save("k2", {"describe": "Other"})
    damaged.path.write_bytes(damaged.path.read_bytes()[:-1])
    cache.main([])
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("  Net.forward(x)  ") and len(out) == 4
    assert out[2:] == ["1 entry file(s) that no compilation reads (a compilation that meets one of yours removes it; "
                       "python -m thunder_ext.tools.cache clear removes all):",
                       f"  {damaged.path}: its content does not match its digest (truncated or changed)"]  # fmt: skip
    assert whole.path.exists() and damaged.path.exists()
    cache.main(["clear"])
    assert capsys.readouterr().out == f"removed 2 entries from {tmp_path}\n" and list(tmp_path.iterdir()) == []


@pytest.mark.executor_sets("defaults")  # compiles nothing
@pytest.mark.parametrize("setting, state", [
    (None, "on (the default; THUNDER_EXT_CACHE=0 turns it off)"),
    ("opt-in", "off (THUNDER_EXT_CACHE=opt-in: on only where a compilation asks"),
    ("0", "off (THUNDER_EXT_CACHE=0: for every compilation, compile_cache=True included)"),
])  # fmt: skip
def test_the_cache_command_says_whether_the_cache_is_on_and_why(setting, state, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("THUNDER_EXT_CACHE", raising=False)
    if setting is not None:
        monkeypatch.setenv("THUNDER_EXT_CACHE", setting)
    cache.main([])
    assert capsys.readouterr().out.startswith(f"compile cache: {tmp_path}, {state}")


def test_the_cuda_home_filter_hides_torchs_line_and_no_other():
    hide = thunder_ext.logs.HideCudaHome()
    cuda = logging.LogRecord("torch.utils.cpp_extension", logging.WARNING, "cpp_extension.py", 117,
                             "No CUDA runtime is found, using CUDA_HOME='%s'", ("/usr/local",), None)  # fmt: skip
    others = [logging.LogRecord("torch.utils.cpp_extension", logging.WARNING, "cpp_extension.py", 1, msg, args, None)
              for msg, args in [("No ROCm runtime is found, using ROCM_HOME='%s'", ("/opt/rocm",)),  # torch's next
                                ("There are no %s version bounds defined for CUDA version %s", ("g++", "12.8"))]]
    assert not hide.filter(cuda) and all(hide.filter(r) for r in others)


@pytest.mark.executor_sets("defaults")  # compiles nothing
def test_importing_the_project_hides_torchs_cuda_home_line_during_the_import_only():
    # CUDA_HOME: the line comes wherever torch has CUDA and finds no GPU, not only where a toolkit is installed
    code = ("import logging, thunder_ext\nlog = logging.getLogger('torch.utils.cpp_extension')\n"
            "assert log.filters == []\nlog.warning('No CUDA runtime is found, using CUDA_HOME=%s', 'later')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CUDA_HOME": "/nonexistent"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "No CUDA runtime" in line]  # torch's format
    assert line.endswith("No CUDA runtime is found, using CUDA_HOME=later")


@pytest.mark.executor_sets("defaults")  # compiles nothing
@pytest.mark.parametrize("repeat, rounds", [(2, 3), (12, 3), (13, 3), (5, 5), (7, 2)])
def test_timed_blocks_counts_every_call_of_the_timing(repeat, rounds):
    calls = []
    interleaved_samples({"a": lambda: calls.append(1)}, torch.device("cpu"), warmup=0, repeat=repeat, rounds=rounds)
    assert sum(timed_blocks(repeat, rounds)) == repeat and len(calls) == repeat + len(timed_blocks(repeat, rounds))


@pytest.mark.executor_sets("defaults")  # eager only
def test_the_demo_needs_exactly_the_positions_it_checks_for_and_its_help_says_how_many(capsys):
    prompt = torch.zeros(1, PROMPT_TOKENS, dtype=torch.long)
    needed = positions_needed(TOKENS)
    for length in (needed, needed - 1):
        decoder = Decoder(small_model(length), prompt, growing=False)
        decoder.step()  # the demo's first decode step, then its timing
        run = functools.partial(interleaved_samples, {"eager": decoder.step}, torch.device("cpu"), warmup=0,
                                repeat=TOKENS, rounds=ROUNDS)  # fmt: skip
        if length == needed:
            run()
        else:
            with pytest.raises(IndexError, match="index out of range"):  # the user's traceback, issue 63
                run()
    with pytest.raises(SystemExit):
        demo_main(["--help"])
    assert f"(so {needed} for --tokens {TOKENS})" in " ".join(capsys.readouterr().out.split())
