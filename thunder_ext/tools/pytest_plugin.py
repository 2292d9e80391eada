"""pytest plugin: ``--thunder-ext`` runs any test suite, thunder's own included, under ``thunder_ext.jit``;
``--executor-set torch_compile`` puts thunder's torch.compile executor ahead of thunder's default executors
(which ``thunder.jit`` and ``thunder_ext.jit`` use when given none).

Installed as the ``thunder_ext`` pytest11 entry point, so every pytest run in this environment loads it;
without the option it changes nothing (loading it imports ``thunder_ext``, and with it thunder).

    cd /tmp && python -m pytest -p no:cacheprovider --thunder-ext --pyargs thunder.tests.test_update_aliases

Routes by which thunder's suites reach the jit, all covered by replacing the attribute ``thunder.jit``
in ``pytest_configure``, which runs before any test module is imported:
- ``thunder.jit(...)`` in the tests and in ``thunder.tests.framework`` (``TestExecutor.make_callable``);
- ``thunder_jit = partial(thunder.jit, ...)`` at the top of ``test_jit_general``: bound at import, i.e.
  after ``pytest_configure``;
- ``from thunder import jit`` inside functions (``thunderfx``'s ``ThunderCompiler``, ``add_transform``,
  recipes) and ``thunder.grad``'s global ``jit``: all looked up at call time.
No module of thunder binds ``jit`` by name at import (``thunder.functional`` does not exist in 0.2.6).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

OPTION = "--thunder-ext"
EXECUTOR_SET_OPTION = "--executor-set"
_ORIGINAL_JIT = pytest.StashKey[Callable]()
_ORIGINAL_DEFAULTS = pytest.StashKey[list]()


def executors_of(name: str) -> list:
    """The executors the set ``name`` puts ahead of thunder's defaults."""
    if name == "torch_compile":
        from thunder.executors.torch_compile import torch_compile_ex

        return [torch_compile_ex]
    return []


EXECUTOR_SETS = ("defaults", "torch_compile")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        action="store_true",
        default=False,
        help="replace thunder.jit with thunder_ext.jit (functionalized in-place writes run in place)",
    )
    parser.addoption(
        EXECUTOR_SET_OPTION,
        choices=EXECUTOR_SETS,
        help="torch_compile: thunder's torch.compile executor ahead of thunder's default executors",
    )


def pytest_configure(config: pytest.Config) -> None:
    if (name := config.getoption(EXECUTOR_SET_OPTION)) not in (None, "defaults"):
        import thunder

        defaults = config.stash[_ORIGINAL_DEFAULTS] = list(thunder.get_default_executors())
        thunder.extend.set_default_executors([*executors_of(name), *defaults])
    if not config.getoption(OPTION):
        return
    import thunder

    import thunder_ext  # its jit binds the original thunder.jit at import, so the swap cannot recurse

    thunder_ext.adapt_thunder()  # before collection: thunder's suites generate a test per in-place op it has
    config.stash[_ORIGINAL_JIT] = thunder.jit
    thunder.jit = thunder_ext.jit


# thunder's expected failures that the extension fixes, each with what fixes it: under ``--thunder-ext`` they run as
# tests that must pass (thunder marks them strict, so they would fail as unexpected passes)
FIXED_BY_THE_EXTENSION = {
    "test_litgpt_variants_kvcache[cpu-mixtral-like]": "litgpt's mixture of experts: thunder_ext/integrations/litgpt_moe.py",
    "test_litgpt_variants_kvcache[cuda-mixtral-like]": "litgpt's mixture of experts: thunder_ext/integrations/litgpt_moe.py",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption(OPTION):
        return
    for item in items:
        if item.name in FIXED_BY_THE_EXTENSION:
            item.own_markers = [m for m in item.own_markers if m.name != "xfail"]


def pytest_unconfigure(config: pytest.Config) -> None:
    if (original := config.stash.get(_ORIGINAL_JIT, None)) is not None:
        import thunder

        thunder.jit = original
    if (defaults := config.stash.get(_ORIGINAL_DEFAULTS, None)) is not None:
        import thunder

        thunder.extend.set_default_executors(defaults)
