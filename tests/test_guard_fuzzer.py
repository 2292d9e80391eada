"""The compile cache's guard, fuzzed (``guard_fuzzer.py``): B, a call that shares A's cache key and differs from A
in one Python value, computes what eager does, whether it compiled or loaded A's entry; B equal to A loads.

CI runs ``THUNDER_EXT_GUARD_FUZZ_PAIRS`` pairs (100 by default: about 1.5 minutes on the 2-core VM) from each of
two seeds, ``THUNDER_EXT_GUARD_FUZZ_SEED`` (0) and the next, as two tests that two workers run side by side; a
failure reproduces with ``guard_fuzzer.py --seed S --index I``. A long run::

    THUNDER_EXT_GUARD_FUZZ_PAIRS=2000 THUNDER_EXT_GUARD_FUZZ_SEED=1 .venv/bin/python -m pytest -p no:randomly \\
        tests/test_guard_fuzzer.py -k one_python_value -s

(docs/records/fuzz_runs.md, "Guard fuzzer", records each run).
"""

from __future__ import annotations

import os

import pytest
import torch

import thunder_ext
from guard_fuzzer import FOUND_CASES, checked, found_pair, run_pair, run_pairs

# the cache holds entries of the default executors (as in test_compile_cache.py)
pytestmark = pytest.mark.executor_sets("defaults")

PAIRS = int(os.environ.get("THUNDER_EXT_GUARD_FUZZ_PAIRS", "100"))
SEED = int(os.environ.get("THUNDER_EXT_GUARD_FUZZ_SEED", "0"))


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    """The cache as the suite leaves it (on only where a compilation asks, in a folder of this test's), restored
    after: each pair points ``THUNDER_EXT_CACHE_DIR`` at a folder of its own."""
    monkeypatch.setenv("THUNDER_EXT_CACHE", "opt-in")
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.parametrize("seed", [SEED, SEED + 1])
def test_a_call_that_differs_in_one_python_value_computes_what_eager_does(cache_env, seed):
    summary = run_pairs(seed, PAIRS, cache_env)
    report = checked(summary)
    # not vacuous: every A was saved, every B of A's state loaded it, and most pairs differ
    assert all(o.saved for o in summary.outcomes if not o.discarded), report
    assert len(summary.discarded) < len(summary.outcomes) / 10, report
    assert summary.must_load and not summary.not_loaded, report
    assert len(summary.must_load) < len(summary.outcomes) / 2, report


@pytest.mark.parametrize("case", list(FOUND_CASES))
def test_a_call_that_differs_in_a_value_the_fuzzer_found_unguarded_compiles(cache_env, case):
    """Each place the first state digest did not see (FOUND_CASES): B loaded A's entry and computed A's value."""
    pair = found_pair(case)
    outcome = run_pair(pair, cache_env / pair.name)
    assert outcome.error is None and outcome.saved, outcome.error or pair.show()
    assert outcome.equal and not outcome.loaded, pair.show()


def _double(module, args, out):
    return out * 2.0


@pytest.mark.parametrize("hooked", [False, True])
def test_a_module_equal_to_one_compiled_loads_its_entry(cache_env, hooked):
    # with a hook: its key in _forward_hooks is its handle's id, a count of the process's hooks (keyed by order now)
    def make():
        torch.manual_seed(0)
        module = torch.nn.Linear(4, 4)
        if hooked:
            module.register_forward_hook(_double)
        return module

    x = torch.randn(2, 4)
    with torch.no_grad():
        thunder_ext.jit(make(), compile_cache=True)(x)
        jitted = thunder_ext.jit(make(), compile_cache=True)
        assert torch.allclose(jitted(x), make()(x))
    assert thunder_ext.cache_loads(jitted) == 1
