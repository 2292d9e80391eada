"""What the next GPU run should look at first: the wrong value the fuzzer found with nvFuser
(tests/fuzz_regressions/cuda/found_4c28956511b5.py, a strict known failure). The guess (docs/gpu.md): nvFuser
returns a reduction over a size-1 axis as a view of its input, so a write into the input after the region
changes what the region returned. This prints whether that storage is shared, and the final trace and the
decisions of the failing program, so the guess is confirmed or dropped in one short run.

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
    a0 = torch.randn(1, device="cuda")
    total = thunder.jit(lambda a: a.sum())
    result = total(a0)
    print("PROBE stock thunder.jit, sum of a one-element tensor: shares its storage:", shares_storage(result, a0))
    print(thunder.last_traces(total)[-1])

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
