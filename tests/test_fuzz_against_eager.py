"""Differential fuzzing: random in-place programs under thunder_ext.jit against eager PyTorch.

CI runs ``THUNDER_EXT_FUZZ_EXAMPLES`` programs (200 by default, half as many under the torch.compile executor)
from a fixed seed, so a CI failure reproduces. Setting the variable gives a long, randomized run::

    THUNDER_EXT_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest -p no:randomly tests/test_fuzz_against_eager.py -k random

(on a 2-core CPU: about 20 minutes under thunder's defaults, plus about half an hour for the programs
around the stand-in nvFuser's regions; about 70 minutes with ``--executor-set torch_compile`` and
``OMP_NUM_THREADS=1``; docs/design.md records each run). ``THUNDER_EXT_FUZZ_DEVICE=cuda`` makes the
arguments on the GPU, where thunder's defaults put nvFuser's regions around the writes, and
``THUNDER_EXT_FUZZ_TALLY=FILE`` appends each program's outcome to FILE, for a run stopped at a time limit
(``scripts/gpu_check.sh`` does both).

The same programs run again with the stand-in nvFuser of ``fake_nvfuser.py`` building regions (under
thunder's defaults only): which writes the extension keeps in nvFuser regions, how it gives the others
back, and the order all of it then runs in, on a CPU.

A failing program is printed as Python and saved to ``tests/fuzz_regressions/`` (``fake_nvfuser/``
there for the second test), headed by the error it raised: at once as found, then replaced by its shrunk
form when shrinking ends. Every file there is replayed by ``test_regression`` on each run, so commit it
with the fix (and a header saying what it found): under every scheduler on thunder's defaults, under the one its
text picks on the torch.compile executor (every pair on a long run).
"""

import os
import re
import traceback
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis.control import current_build_context
from hypothesis.errors import UnsatisfiedAssumption

import thunder_ext
from fake_nvfuser import FakeFusionPass
from thunder_ext.executors.nvfuser_inplace import NO_CUDA
from hypothesis import strategies as st
from program_fuzzer import (
    DEVICE,
    SCHEDULERS,
    GradSetting,
    Program,
    check_against_eager,
    grad_settings,
    programs,
)

LONG_RUN = "THUNDER_EXT_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("THUNDER_EXT_FUZZ_EXAMPLES", "200"))
REGRESSIONS = Path(__file__).parent / "fuzz_regressions"
FAKE_NVFUSER_REGRESSIONS = REGRESSIONS / "fake_nvfuser"
GRAD_REGRESSIONS = REGRESSIONS / "requires_grad"
STATE_REGRESSIONS = REGRESSIONS / "module_state"  # found with the first argument a module's buffer
# found on a GPU (THUNDER_EXT_FUZZ_DEVICE=cuda, nvFuser's regions), with or without a grad setting; replayed there only
CUDA_REGRESSIONS = REGRESSIONS / "cuda"
_UNSHRUNK: dict[Path, Path] = {}  # per folder, the first failing program of this run, saved as soon as it failed


FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=not LONG_RUN,
    deadline=None,  # a compilation takes a good part of a second
    suppress_health_check=[HealthCheck.too_slow],
)


def _examples(executor_set: str, n: int = EXAMPLES) -> int:
    """CI's programs under ``executor_set``: half as many under the torch.compile executor, whose Inductor
    compilations make a program about four times as long (CI time); a long run gives every set ``n``."""
    return n if LONG_RUN or executor_set != "torch_compile" else max(n // 2, 1)


def test_random_inplace_programs_match_eager(executor_set: str):
    @settings(FUZZ, max_examples=_examples(executor_set))
    @given(programs())
    def run(program: Program):
        _check_keeping_failures(program, REGRESSIONS)

    run()


@pytest.mark.executor_sets("defaults")  # the stand-in is a fusion executor of its own
@FUZZ
@given(programs())
def test_random_inplace_programs_match_eager_around_fake_nvfuser_regions(program: Program):
    _check_keeping_failures(program, FAKE_NVFUSER_REGRESSIONS, fusion=FakeFusionPass)


def test_random_inplace_programs_match_eager_with_inputs_that_require_grad(executor_set: str):
    # each differentiated program compiles a backward too: a third as many
    @settings(FUZZ, max_examples=_examples(executor_set, max(EXAMPLES // 3, 1)))
    @given(programs(), st.data())
    def run(program: Program, data):
        n_args = program.source.split("def program(")[1].split(")")[0].count(",") + 1
        setting = data.draw(grad_settings(n_args), label="grad setting")
        # saved with the setting as its first line, so that test_regression_with_inputs_that_require_grad replays it
        headed = Program(setting.header() + program.source)
        _check_keeping_failures(headed, GRAD_REGRESSIONS, grad=setting)

    run()


def test_random_inplace_programs_match_eager_with_a_modules_buffer_as_an_argument(executor_set: str):
    # issue 60, item 5: m(m.s), and arguments that view it; a quarter as many (CI time)
    @settings(FUZZ, max_examples=_examples(executor_set, max(EXAMPLES // 4, 1)))
    @given(programs())
    def run(program: Program):
        _check_keeping_failures(program, STATE_REGRESSIONS, state=True)

    run()


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=lambda s: s.__name__)
def test_each_scheduler_keeps_a_backward_that_returns_its_cotangent(scheduler):
    # found under SinkReads, which put `clear_mutable_collection(cotangents)` above `t2, = cotangents`; the saved
    # file's header lines give it another name, and so another scheduler, when test_regression_... replays it
    source = (GRAD_REGRESSIONS / "found_84af56ed28e3.py").read_text()
    check_against_eager(Program(source), scheduler, grad=GradSetting.of(source))


def _check_keeping_failures(program: Program, folder: Path, **kwargs) -> None:
    folder = CUDA_REGRESSIONS if DEVICE.type == "cuda" else folder
    try:
        check_against_eager(program, **kwargs)
        _tally("passed")
    except UnsatisfiedAssumption:
        _tally("invalid")
        raise
    except Exception as error:
        if _interrupted(error):  # thunder's interpreter wraps a Ctrl-C or a time limit's SIGINT: nothing to keep
            raise KeyboardInterrupt from error
        _tally(f"failed: {type(error).__name__}")
        if current_build_context().is_final:  # the shrunk example replaces the first one
            if unshrunk := _UNSHRUNK.pop(folder, None):
                unshrunk.unlink(missing_ok=True)
            _save(program, folder, error)
        elif folder not in _UNSHRUNK:
            # Shrinking compiles every candidate and may take many minutes: a run stopped while
            # shrinking still leaves the program it found.
            _UNSHRUNK[folder] = _save(program, folder, error)
        raise


def _interrupted(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__cause__
    return False


def _tally(outcome: str) -> None:
    """Where ``THUNDER_EXT_FUZZ_TALLY`` names a file, one line per program checked: a run stopped at a time
    limit (scripts/gpu_check.sh) still says how many programs passed."""
    if path := os.environ.get("THUNDER_EXT_FUZZ_TALLY"):
        with open(path, "a") as tally:
            tally.write(outcome + "\n")


def _save(program: Program, folder: Path, error: Exception) -> Path:
    """Saves the program headed by the error it raised: Hypothesis names the error only when the run ends."""
    folder.mkdir(exist_ok=True)
    path = folder / f"found_{program.name}.py"
    message = "".join(traceback.format_exception_only(error)).strip().splitlines()[:8]
    path.write_text("".join(f"# {line}\n" for line in message) + program.source)
    return path


KNOWN_FAILURE = "# known failure: "
KNOWN_FAILURE_UNDER = re.compile(r"# known failure under (\w+)(?: with (\w+))?: (.*)")


def _known_failure(path: Path) -> list:
    """A saved program whose first line starts with ``KNOWN_FAILURE`` and says why is a strict xfail: it
    stays replayed, and the day it passes the run says so. One that fails under one executor set only
    says which (``KNOWN_FAILURE_UNDER``); ``test_regression`` marks it there."""
    first = path.read_text().splitlines()[0]
    return [pytest.mark.xfail(strict=True, reason=first[len(KNOWN_FAILURE) :])] if first.startswith(KNOWN_FAILURE) else []


def _regressions() -> list:
    """Every saved program; those found around the stand-in nvFuser's regions replay around them."""
    return [pytest.param(p, None, id=p.stem, marks=_known_failure(p)) for p in sorted(REGRESSIONS.glob("*.py"))] + [
        pytest.param(p, FakeFusionPass, id=f"fake_nvfuser-{p.stem}",
                     marks=[pytest.mark.executor_sets("defaults"), *_known_failure(p)])
        for p in sorted(FAKE_NVFUSER_REGRESSIONS.glob("*.py"))
    ]  # fmt: skip


def _under_each_scheduler(params: list) -> list:
    """Each saved program under every scheduler on thunder's defaults, and on the other executor sets under the one
    its text picks (``Program.scheduler``, as the random tests pick; CI time: each is an Inductor compilation there,
    and every scheduler still runs there, each on a share of the programs); a long run, every pair on every set."""
    cases = []
    for param in params:
        own = Program(param.values[0].read_text()).scheduler
        for scheduler in SCHEDULERS:
            narrowed = [] if LONG_RUN or scheduler is own else [pytest.mark.executor_sets("defaults")]
            cases.append(pytest.param(*param.values, scheduler, id=f"{param.id}-{scheduler.__name__}",
                                      marks=[*param.marks, *narrowed]))  # fmt: skip
    return cases


@pytest.mark.parametrize(("path", "fusion", "scheduler"), _under_each_scheduler(_regressions()))
def test_regression(path: Path, fusion, scheduler, executor_set: str, request: pytest.FixtureRequest):
    source = path.read_text()
    _mark_if_known_failure_under(source, executor_set, request, scheduler)
    check_against_eager(Program(source), scheduler, fusion=fusion)


GRAD_REGRESSION_PARAMS = [
    pytest.param(p, id=p.stem, marks=_known_failure(p)) for p in sorted(GRAD_REGRESSIONS.glob("*.py"))
]


@pytest.mark.parametrize(("path", "scheduler"), _under_each_scheduler(GRAD_REGRESSION_PARAMS))
def test_regression_with_inputs_that_require_grad(
    path: Path, scheduler, executor_set: str, request: pytest.FixtureRequest
):
    source = path.read_text()
    _mark_if_known_failure_under(source, executor_set, request, scheduler)
    check_against_eager(Program(source), scheduler, grad=GradSetting.of(source))


@pytest.mark.parametrize("path", sorted(STATE_REGRESSIONS.glob("*.py")), ids=lambda p: p.stem)
def test_regression_with_a_modules_buffer_as_an_argument(path: Path, executor_set: str, request):
    source = path.read_text()
    _mark_if_known_failure_under(source, executor_set, request)
    check_against_eager(Program(source), state=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.stem, marks=_known_failure(p)) for p in sorted(CUDA_REGRESSIONS.glob("*.py"))]
)
def test_regression_on_cuda(path: Path, executor_set: str, request: pytest.FixtureRequest):
    source = path.read_text()
    _mark_if_known_failure_under(source, executor_set, request)
    grad = GradSetting.of(source) if GradSetting.HEADER in source else None
    check_against_eager(Program(source), grad=grad, device=torch.device("cuda"))


def _mark_if_known_failure_under(
    source: str, executor_set: str, request: pytest.FixtureRequest, scheduler: type | None = None
) -> None:
    """``# known failure under <set>: why``, or ``under <set> with <scheduler>: why`` for one scheduler alone."""
    known = KNOWN_FAILURE_UNDER.match(source)
    if known and known[1] == executor_set and known[2] in (None, getattr(scheduler, "__name__", None)):
        request.applymarker(pytest.mark.xfail(strict=True, reason=known[3]))


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


PARTIALLY_OVERLAPPING = Program(
    '''import torch


def program(a0):
    r1 = a0 * 1.5
    v2 = r1[:, 1:]
    v2.permute((1, 0)).mul_(v2)
    return (r1,)


def make_args():
    return [torch.arange(6.0).reshape(2, 3) + 1]
'''
)


def test_a_program_whose_write_reads_a_partial_overlap_of_its_target_is_discarded_as_eager_cannot_define_it():
    # eager's overlap check cannot tell for a non-dense view, and its value depends on the order it visits elements
    # in (found by the fuzzer, seed 26: found_a1129ffc4d16); the extension computes every source element first
    with pytest.raises(UnsatisfiedAssumption):
        check_against_eager(PARTIALLY_OVERLAPPING)
    # the same elements in the same layout, disjoint elements of one storage, a copy: each defined, each compared
    for write in ("v2.mul_(v2)", "r1[0].mul_(r1[1])", "v2.permute((1, 0)).mul_(v2.clone())"):
        check_against_eager(Program(PARTIALLY_OVERLAPPING.source.replace("v2.permute((1, 0)).mul_(v2)", write)))
