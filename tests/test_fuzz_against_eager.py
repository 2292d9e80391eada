"""Differential fuzzing: random in-place programs under thunder_ext.jit against eager PyTorch.

CI runs ``THUNDER_EXT_FUZZ_EXAMPLES`` programs (300 by default) from a fixed seed, so a CI failure
reproduces. Setting the variable gives a long, randomized run::

    THUNDER_EXT_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest -p no:randomly tests/test_fuzz_against_eager.py -k random

(about 20 minutes on a 2-core CPU; docs/design.md records the last such run).

A failing program is printed as Python and saved to ``tests/fuzz_regressions/``: at once as found,
then replaced by its shrunk form when shrinking ends. Every file there is replayed by
``test_regression`` on each run, so commit it with the fix.
"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.control import current_build_context
from hypothesis.errors import UnsatisfiedAssumption

import thunder_ext
from program_fuzzer import SCHEDULERS, Program, check_against_eager, programs

LONG_RUN = "THUNDER_EXT_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("THUNDER_EXT_FUZZ_EXAMPLES", "300"))
REGRESSIONS = Path(__file__).parent / "fuzz_regressions"
_UNSHRUNK: list[Path] = []  # the first failing program of this run, saved as soon as it failed


@settings(
    max_examples=EXAMPLES,
    derandomize=not LONG_RUN,
    deadline=None,  # a compilation takes a good part of a second
    suppress_health_check=[HealthCheck.too_slow],
)
@given(programs())
def test_random_inplace_programs_match_eager(program: Program):
    try:
        check_against_eager(program)
    except UnsatisfiedAssumption:
        raise
    except Exception:
        if current_build_context().is_final:  # the shrunk example replaces the first one
            for path in _UNSHRUNK:
                path.unlink(missing_ok=True)
            _save(program)
        elif not _UNSHRUNK:
            # Shrinking compiles every candidate and may take many minutes: a run stopped while
            # shrinking still leaves the program it found.
            _UNSHRUNK.append(_save(program))
        raise


def _save(program: Program) -> Path:
    REGRESSIONS.mkdir(exist_ok=True)
    path = REGRESSIONS / f"found_{program.name}.py"
    path.write_text(program.source)
    return path


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=lambda s: s.__name__)
@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("*.py")), ids=lambda p: p.stem)
def test_regression(path: Path, scheduler):
    check_against_eager(Program(path.read_text()), scheduler)


ALIASED = Program("""
import torch


def program(a0, a1):
    a0.add_(1.0)
    return (a1 * 2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((3,))
    return [a0, a0]
""")


@pytest.mark.parametrize(
    "error",
    [KeyError("an internal error"), RuntimeError("index dtype=thunder.dtypes.float32 was not an integer dtype")],
    ids=["undocumented", "thunders-text-that-stock-thunder-does-not-raise"],
)
def test_a_failure_with_aliased_arguments_counts_only_as_a_documented_refusal(monkeypatch, error):
    def failing_jit(fn, **kwargs):
        def call(*args):
            raise error

        return call

    check_against_eager(ALIASED)  # the program itself passes
    monkeypatch.setattr(thunder_ext, "jit", failing_jit)
    with pytest.raises((type(error), AssertionError)):
        check_against_eager(ALIASED)
