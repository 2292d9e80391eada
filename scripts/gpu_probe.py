"""What the GPU run looks at first: the wrong value the fuzzer found with nvFuser
(tests/fuzz_regressions/cuda/found_4c28956511b5.py). The finding (nvFuser's source, transforms/aliasing_as_traced.py):
nvFuser runs a reduction over size-1 axes as a squeeze and a clone as a set, and returns both as views of the
region's input, so a write into the input after the region changes what the region returned. This prints
whether stock thunder's nvFuser regions share that storage, and the final trace, decisions and value of the
fuzzer's program under thunder_ext, so the finding and its fix are confirmed or refuted in one short run.

    python scripts/gpu_probe.py   (on a CUDA machine; scripts/gpu_check.sh runs it into its log)
"""

import runpy
from pathlib import Path

import torch
import thunder

import thunder_ext
from thunder_ext.thunder026.adapt import adapt_thunder


FOUND = Path(__file__).parent.parent / "tests" / "fuzz_regressions" / "cuda" / "found_4c28956511b5.py"


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def main() -> None:
    adapt_thunder()  # nvFuser 0.2.36's layout descriptor (thunder026/adapt.py), else no region runs
    for what, fn, a in (
        ("sum of a one-element tensor", lambda a: a.sum(), torch.randn(1, device="cuda")),
        ("clone", lambda a: a.clone(), torch.randn(4, device="cuda")),
        ("amax over a size-1 axis", lambda a: a.amax(1), torch.randn(3, 1, device="cuda")),
    ):
        jitted = thunder.jit(fn)
        print(f"PROBE stock thunder.jit, {what}: shares its input's storage:", shares_storage(jitted(a), a))
        print(thunder.last_traces(jitted)[-1])

    found = runpy.run_path(str(FOUND))  # the saved program itself, as test_regression_on_cuda replays it
    program, make_args = found["program"], found["make_args"]
    with torch.device("cuda"):
        a0, a1 = make_args()
    expected = a0.sum().item()
    jitted = thunder_ext.jit(program)
    (r3,) = jitted(a0.clone(), a1)
    print(f"PROBE the fuzzer's program: sum {r3.item():.6f}, eager {expected:.6f}, equal: {abs(r3.item() - expected) < 1e-5}")
    print(thunder.last_traces(jitted)[-1])
    for decision in thunder_ext.inplace_decisions(jitted):
        print("PROBE decision:", decision)


if __name__ == "__main__":
    main()
