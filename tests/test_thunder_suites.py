"""thunder's own in-place suites, run with thunder.jit replaced by thunder_ext.jit (the ``--thunder-ext``
pytest option of ``thunder_ext.tools.pytest_plugin``); see docs/thunder_suites.md for the command and results."""

import os
import re
import subprocess
import sys

import pytest

SUITES = {
    "test_inplace_copy": ["thunder.tests.test_inplace_copy"],
    "test_update_aliases": ["thunder.tests.test_update_aliases"],
}
# CI time: of thunder's five variants, the mixture of experts (thunder's expected failure, which the extension
# fixes) and grouped queries; tests/test_litgpt_kvcache.py runs the other llamas under thunder_ext.jit
LITGPT_VARIANTS_KVCACHE = ["thunder.tests.test_jit_general", "-k", "litgpt_variants_kvcache and (mixtral or llama2)"]


def run_thunder_suite(suite: list[str], executor_set: str, folder, cache=None) -> str:
    """What pytest printed; ``cache``: the compile cache's folder, where it is on (the log shown at INFO)."""
    # run from an empty folder: this project's pytest settings must not apply to thunder's tests
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--thunder-ext"]
    command += ["--executor-set", executor_set, "--pyargs"]
    env = dict(os.environ)
    if cache is not None:
        env.update(THUNDER_EXT_CACHE="1", THUNDER_EXT_CACHE_DIR=str(cache))
        command += ["-o", "log_cli=true", "--log-cli-level=INFO"]
    run = subprocess.run([*command, *suite], cwd=folder, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1], run.stdout[-2000:]
    return run.stdout


@pytest.mark.parametrize("suite", SUITES)
def test_thunder_suite_passes_under_the_extension(suite, executor_set, tmp_path):
    run_thunder_suite(SUITES[suite], executor_set, tmp_path)


# CI time: under thunder's defaults, whose compilations are stored (the torch.compile executor's regions are not)
@pytest.mark.executor_sets("defaults")
def test_thunders_inplace_suites_pass_again_with_the_compile_cache_the_first_run_filled(executor_set, tmp_path):
    suites = [name for suite in SUITES.values() for name in suite]
    cold = run_thunder_suite(suites, executor_set, tmp_path, cache=tmp_path / "cache")
    warm = run_thunder_suite(suites, executor_set, tmp_path, cache=tmp_path / "cache")
    # the second run ran entries the first saved (84 compilations, 64 loads then: some tests draw random sizes),
    # and thunder's tests looked at their traces and counters
    compiled = [run.count("thunder_ext: compiled") for run in (cold, warm)]
    assert compiled[1] < compiled[0] / 3 and warm.count("thunder_ext: loaded") > 50, (compiled, warm[-3000:])
    passed = [re.search(r"(\d+) passed", run.splitlines()[-1]).group(1) for run in (cold, warm)]
    assert passed[0] == passed[1], passed


# CI time (150 s a set): thunder's litgpt variants run under both sets in tests/test_litgpt_kvcache.py
@pytest.mark.executor_sets("defaults")
def test_thunders_litgpt_kvcache_variants_pass_under_the_extension(executor_set, tmp_path):
    run_thunder_suite(LITGPT_VARIANTS_KVCACHE, executor_set, tmp_path)


def test_the_option_replaces_thunder_jit_and_only_with_it(pytester):
    pytester.makepyfile(
        "import thunder, thunder_ext\n"
        "def test_jit_is_replaced():\n"
        "    assert thunder.jit is thunder_ext.jit\n"
    )
    pytester.runpytest_inprocess("--thunder-ext").assert_outcomes(passed=1)
    pytester.runpytest_inprocess().assert_outcomes(failed=1)
