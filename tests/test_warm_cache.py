"""The project's in-place tests, run a second time against the compile cache the first run filled: a loaded entry
must give every result, trace, counter and decision a fresh compilation gives, or the second run fails a test the
first passed (issue 60). thunder's own suites run so too (``tests/test_thunder_suites.py``)."""

import os
import re
import subprocess
import sys

import pytest

# each compares compiled writes with eager's (outputs, mutated inputs, gradients, decisions, traces): 457 tests,
# 145 s cold and 64 s warm on a 2-core CPU (2026-11-29), 246 of the warm run's 271 compilations loaded
SUBSET = ["tests/test_inplace_correctness.py", "tests/test_guarantees.py", "tests/test_kv_idioms.py",
          "tests/test_requires_grad.py", "tests/test_view_write_gradients.py", "tests/test_optimizers.py",
          "tests/test_argument_containers.py", "tests/test_arguments_sharing_state.py", "tests/test_bad_input.py",
          "tests/test_reuse_buffers.py", "tests/test_tensor_scatter.py"]


def run_subset(root, cache) -> str:
    """What pytest printed for ``SUBSET`` under thunder's defaults (whose compilations the cache stores), with the
    cache on in ``cache`` (``THUNDER_EXT_TESTS_CACHE``, read by the conftest) and its log shown."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--executor-set", "defaults",
               "-o", "log_cli=true", "--log-cli-level=INFO", *SUBSET]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    env["THUNDER_EXT_TESTS_CACHE"] = str(cache)
    run = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    return run.stdout


@pytest.mark.executor_sets("defaults")
def test_the_inplace_tests_pass_again_where_their_compilations_are_loaded(request, tmp_path):
    root = request.config.rootpath
    cold, warm = run_subset(root, tmp_path / "cache"), run_subset(root, tmp_path / "cache")
    passed = [int(re.search(r"(\d+) passed", run.splitlines()[-1]).group(1)) for run in (cold, warm)]
    assert passed[0] == passed[1] > 0, passed
    compiled = [run.count("thunder_ext: compiled") for run in (cold, warm)]
    loaded = [run.count("thunder_ext: loaded") for run in (cold, warm)]
    # most of the second run's calls ran what the first saved
    assert loaded[1] > compiled[1] and compiled[1] < compiled[0] / 2, (compiled, loaded)
