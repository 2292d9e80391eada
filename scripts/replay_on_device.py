"""Replays saved fuzz programs on a device, to see where a failure comes from (the GPU check's ``replay`` step).

    python scripts/replay_on_device.py --device cuda tests/fuzz_regressions/cuda/found_28c18d937427.py ...

For each program, as the fuzzer ran it (its scheduler, grad mode and arguments requiring grad), three compilations
against eager: ``thunder_ext.jit`` with thunder's default executors, the same without nvFuser, and stock
``thunder.jit``. Each says whether outputs, arguments after the call and gradients match eager's, or its error; then
the extension's final forward and backward traces (nvFuser's regions with their prims), and the nvFuser definition
of each region that ran.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import thunder
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import clone_args
from program_fuzzer import GRAD_MODES, GradSetting, Program, _differentiate, _with_grad

import thunder_ext


def differences(actual, expected, jit_args, eager_args) -> list[str]:
    """What differs from eager: outputs, arguments after the call, gradients of leaves that require grad."""
    pairs = [(f"output {i}", a, e) for i, (a, e) in enumerate(zip(actual, expected))]
    pairs += [(f"argument {i}", a, e) for i, (a, e) in enumerate(zip(jit_args, eager_args))]
    pairs += [(f"gradient of argument {i}", a.grad, e.grad) for i, (a, e) in enumerate(zip(jit_args, eager_args))
              if e.is_leaf and e.requires_grad]  # fmt: skip
    found = []
    for what, a, e in pairs:
        same_shape = isinstance(a, torch.Tensor) and a.shape == e.shape  # allclose broadcasts, or raises
        if not isinstance(e, torch.Tensor) or (same_shape and torch.allclose(a, e, equal_nan=True)):
            continue
        gap = (a - e).abs().max().item() if same_shape else "n/a"
        found.append(f"{what} differs (largest gap {gap}):\n    got      {a}\n    expected {e}")
    return found


def replay(path: Path, device: torch.device) -> None:
    source = path.read_text()
    program = Program(source)
    grad = GradSetting.of(source) if GradSetting.HEADER in source else GradSetting("grad", ())
    fn, make_args = program.load()
    with device:
        args = make_args()
    mode = GRAD_MODES[grad.mode]
    eager_args = _with_grad(clone_args(args), grad)
    with mode():
        expected = fn(*eager_args)
    positions = [i for i, o in enumerate(expected) if isinstance(o, torch.Tensor) and o.requires_grad]
    _differentiate(expected, positions)
    without_nvfuser = [e for e in thunder.get_default_executors() if e.name != "nvfuser"]
    compilations = {
        "thunder_ext.jit": lambda f: thunder_ext.jit(f, transforms=[program.scheduler()]),
        "thunder_ext.jit without nvFuser": lambda f: thunder_ext.jit(
            f, transforms=[program.scheduler()], executors=without_nvfuser
        ),
        "stock thunder.jit": thunder.jit,
    }
    print(f"\n==== {path.name} on {device} ({grad.header().strip()}, {program.scheduler.__name__})\n{source}")
    jitted = {}
    for name, compile in compilations.items():
        jit_args = _with_grad(clone_args(args), grad)
        jitted[name] = jfn = compile(fn)
        try:
            with mode():
                actual = jfn(*jit_args)
            _differentiate(actual, positions)
        except Exception as error:  # noqa: BLE001  (the point is to see it)
            print(f"== {name}: {type(error).__name__}: {str(error)[:3000]}")
            continue
        print(f"== {name}: " + ("\n".join(differences(actual, expected, jit_args, eager_args)) or "eager's values"))
    jfn = jitted["thunder_ext.jit"]
    for kind, traces in (("forward", thunder.last_traces), ("backward", thunder.last_backward_traces)):
        try:
            trace = traces(jfn)[-1]
        except Exception as error:  # noqa: BLE001  (no trace: the compilation failed before it)
            print(f"== no {kind} trace: {type(error).__name__}: {error}")
            continue
        print(f"== the extension's final {kind} trace\n{trace}")
        for name, region in trace.python_ctx().items():
            # an nvFuser region that has run keeps its FusionDefinition, whose text is a repro for nvFuser's issues
            if (definition := getattr(region, "last_used", None)) is not None:
                print(f"== {name}'s nvFuser definition\n{definition!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("programs", type=Path, nargs="+")
    parser.add_argument("--device", default="cuda")
    options = parser.parse_args()
    for path in options.programs:
        replay(path, torch.device(options.device))


if __name__ == "__main__":
    main()
