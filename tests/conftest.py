"""Every test runs under each executor set: thunder's defaults, and thunder's torch.compile executor
ahead of them (a path proven on one executor is not proven on another).

``--executor-set NAME`` (``thunder_ext.tools.pytest_plugin``) runs one set only. A test, or a module
(``pytestmark``), of a path that only some sets have is marked ``@pytest.mark.executor_sets(*names)``.
"""

import os
import re
import subprocess
import sys
import tempfile
import threading
import warnings

import pytest
import torch

warnings.filterwarnings("ignore", message="transformer_engine module not found")

import thunder  # noqa: E402  (after the filter: thunder warns at import)

from thunder_ext.tools.pytest_plugin import EXECUTOR_SET_OPTION, EXECUTOR_SETS, executors_of  # noqa: E402
from thunder_ext.gc_pause import gc_paused  # noqa: E402

pytest_plugins = ["pytester"]  # tests of the --thunder-ext option run pytest in pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "executor_sets(*names): run the test under these executor sets only")
    config.addinivalue_line("markers", "single_threaded: run the test in a process of one Python thread")
    config.addinivalue_line("markers", "fresh_compilations: the test reads what compiling makes, not what loading does")
    # Every test compiles afresh, and no run shares the compile cache with another or with the user's: the
    # cache is on only where a test asks (opt-in), in a folder of this run's own; tests/test_compile_cache.py turns
    # it on. Where THUNDER_EXT_TESTS_CACHE names a folder, the cache is on there (tests/test_warm_cache.py runs tests
    # twice so).
    if os.environ.get("THUNDER_EXT_TESTS_CACHE"):
        os.environ.update(THUNDER_EXT_CACHE="1", THUNDER_EXT_CACHE_DIR=os.environ["THUNDER_EXT_TESTS_CACHE"])
    else:
        os.environ["THUNDER_EXT_CACHE"] = "opt-in"
        os.environ["THUNDER_EXT_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunder-ext-cache-")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # `-n 2` on two cores: a thread each, not two threads each
        torch.set_num_threads(1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    metafunc.parametrize("executor_set", EXECUTOR_SETS, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect what runs under a set the test is not for, or that ``--executor-set`` did not choose."""
    chosen = config.getoption(EXECUTOR_SET_OPTION)
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("executor_sets")
        name = item.callspec.params["executor_set"]
        wanted = name in (marker.args if marker else EXECUTOR_SETS) and chosen in (None, name)
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test marked ``single_threaded``, where this process runs other Python threads (a pytest-xdist worker's
    execnet threads), runs in a fresh pytest process of its own instead, with this one's torch threads: a process
    forked beside other threads can find their locks held forever (a worker hung so, 2026-11-27). Its outcome is
    the fresh process's, which must run the test, not skip it."""
    if pyfuncitem.get_closest_marker("single_threaded") is None or threading.active_count() == 1:
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    command = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", pyfuncitem.nodeid]
    done = subprocess.run(command, cwd=pyfuncitem.config.rootpath, env=env, capture_output=True, text=True, check=False,
                          timeout=900)  # fmt: skip
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    outcomes = {outcome: int(n) for n, outcome in re.findall(r"(\d+) (\w+)", summary)}
    counted = {k: v for k, v in outcomes.items() if not k.startswith(("warning", "deselected"))}
    if done.returncode != 0 or counted != {"passed": 1}:
        # the traceback first: the captured logs after it can run to megabytes (torch's compile traces)
        failure = done.stdout.partition(" FAILURES ")[2][:6000]
        pytest.fail(f"in a process of its own (rc {done.returncode}):\n{failure}\n[...]\n{done.stdout[-2000:]}\n"
                    f"{done.stderr[-2000:]}")  # fmt: skip
    return True


@pytest.fixture(autouse=True)
def leaves_the_process_settings_as_it_found_them():
    """A test that changes a setting of this process for the tests after it (an environment variable of thunder's
    or the extension's, torch's thread count) fails itself: else a later test in its worker fails, or passes, by
    the order xdist deals them (``suite.main`` left ``THUNDER_EXT_CACHE=0`` behind, and a compile cache test of a
    later file found the cache off, 2026-12-01). Not torch's variables: Inductor sets its cache folder's at its
    first compilation. Torn down after ``monkeypatch``, which restores."""

    def settings() -> dict:
        env = {k: v for k, v in os.environ.items() if k.startswith("THUNDER")}
        return {**env, "torch threads": str(torch.get_num_threads())}

    before = settings()
    yield
    after = settings()
    changed = {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert not changed, f"the test left these settings changed (before, after): {changed}"


@pytest.fixture(autouse=True)
def fresh_compilations(request: pytest.FixtureRequest, leaves_the_process_settings_as_it_found_them: None,
                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A test marked ``fresh_compilations`` reads what a compilation makes and a loaded entry does not (its records
    of traced blocks, its "compiled" log lines): where ``THUNDER_EXT_TESTS_CACHE`` turns the cache on, the test runs
    with it as the suite's default is, on only where a compilation asks (``compile_cache=True``). After the check of
    the settings, so that ``monkeypatch`` restores them before it reads them (autouse fixtures run by name)."""
    if request.node.get_closest_marker("fresh_compilations") and os.environ.get("THUNDER_EXT_TESTS_CACHE"):
        monkeypatch.setenv("THUNDER_EXT_CACHE", "opt-in")


@pytest.fixture(autouse=True)
def executor_set(request: pytest.FixtureRequest):
    """The name of the executor set this test runs under; thunder's defaults hold it meanwhile."""
    name = request.param
    defaults = list(thunder.get_default_executors())
    added = executors_of(name)  # already ahead of the defaults when --executor-set put them there
    thunder.extend.set_default_executors([*added, *(e for e in defaults if e not in added)])
    yield name
    thunder.extend.set_default_executors(defaults)



@pytest.fixture(autouse=True)
def no_collection_while_thunder_traces():
    """No automatic garbage collection while a test runs (it runs between tests). thunder 0.2.6's
    interpreter walks Dynamo's registry of live modules when traced code builds one (litgpt's forward,
    HF transformers' models); once torch.compile has run in the process, a collection during that walk
    shrinks the registry under it ("InterpreterError: ... dictionary changed size during iteration",
    stock thunder too): runs here hit it in a litgpt test and in an HF test. ``gc_paused`` says more."""
    with gc_paused(collect=False):
        yield
