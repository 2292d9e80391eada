"""What the prologue guards of issue 60 cost a call: the same program compiled with and without them
(``guard_argument_containers``, ``refuse_arguments_sharing_written_state``), timed in turns in one process.

    python scripts/guard_cost.py [STEPS]

Two cases: a decode step of the demo model (``thunder_ext.jit``, ``thunder_ext.set_kv_cache``: the state check
reads the storage of each written cache buffer per call; its arguments hold no list, so no container check) and an
SGD step over lists of 400 tensors (the container check walks both lists per call; nothing is state). CPU, one
thread, the compile cache off. Prints a Markdown table: median microseconds per call of each, and their ratio.
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import time

os.environ["THUNDER_EXT_CACHE"] = "0"
import torch

torch.set_num_threads(1)

import thunder  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext.tools.demo_model import small_model  # noqa: E402
from thunder_ext.transforms import pipeline  # noqa: E402

GUARDS = ("guard_argument_containers", "refuse_arguments_sharing_written_state")


def checks(jitted) -> set[str]:
    """The names of the extension's checks in ``jitted``'s last prologue."""
    return {b.sym.name for b in thunder.last_prologue_traces(jitted)[-1].bound_symbols if b.sym.name.startswith("check_")}


def without_guards(compile_call):
    """``compile_call()`` run with the pipeline less the guards: the compilation its first call makes has none."""
    kept = pipeline.PIPELINE
    pipeline.PIPELINE = tuple(s for s in kept if s.name not in GUARDS)
    try:
        return compile_call()
    finally:
        pipeline.PIPELINE = kept


def decode_calls():
    base = small_model(512)
    idx, pos = torch.tensor([[7]]), torch.tensor([3])

    def made():
        model = thunder_ext.jit(copy.deepcopy(base))
        thunder_ext.set_kv_cache(model, batch_size=1, compile_ahead=False)
        with torch.inference_mode():
            model(idx, pos)  # compiles
        return model, lambda: model(idx, pos)

    return made(), without_guards(made), "check_arguments_apart_from_state"


def sgd_calls(n: int = 400):
    def step(ps, gs):
        for p, g in zip(ps, gs):
            p.add_(g, alpha=-0.1)

    ps, gs = [torch.zeros(64) for _ in range(n)], [torch.ones(64) for _ in range(n)]

    def made():
        jitted = thunder_ext.jit(step)
        with torch.no_grad():
            jitted(ps, gs)  # compiles
        return jitted, lambda: jitted(ps, gs)

    return made(), without_guards(made), "check_argument_containers"


def interleaved(a, b, steps: int) -> tuple[float, float]:
    """Median microseconds per call of ``a`` and of ``b``, timed in turns."""
    times = ([], [])
    with torch.inference_mode():
        for _ in range(steps):
            for call, out in ((a, times[0]), (b, times[1])):
                start = time.perf_counter()
                call()
                out.append(time.perf_counter() - start)
    return tuple(statistics.median(t) * 1e6 for t in times)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print("| case | with the guards (µs/call) | without (µs/call) | with / without |")
    print("| --- | --- | --- | --- |")
    for name, calls in (("demo model, decode step", decode_calls), ("SGD step, 400 tensors per list", sgd_calls)):
        (guarded, a), (unguarded, b), check = calls()
        assert check in checks(guarded) and check not in checks(unguarded), (checks(guarded), checks(unguarded))
        with_guards, without = interleaved(a, b, steps)
        print(f"| {name} | {with_guards:.0f} | {without:.0f} | {with_guards / without:.3f} |")


if __name__ == "__main__":
    main()
