"""What the GPU run looks at first: how nvFuser writes an alias output into a region input that is not laid out
in its logical order. The fuzzer found (tests/fuzz_regressions/cuda/found_16274bd1d4e6.py, H200, 2026-11-27) that a
write through a transposed view of an intermediate swapped elements; rule 6 of transforms/regions/nvfuser.py now
gives such a write back. Whether an *argument* the caller passes transposed or sliced is written right is what this
prints: stock thunder.jit's own ``copy_`` (the same ``add_output(..., alias_input=...)``) and thunder_ext.jit, each
against eager, with the final trace and the extension's decisions.

    python scripts/gpu_probe.py   (on a CUDA machine; scripts/gpu_check.sh runs it into its log)
"""

import torch
import thunder

import thunder_ext
from thunder_ext.thunder026.adapt import adapt_thunder


def copy_doubled(x, y):
    x.copy_(y * 2)


def mul_into(x, y):
    x.mul_(y)


def main() -> None:
    adapt_thunder()  # nvFuser 0.2.36's layout descriptor (thunder026/adapt.py), else no region runs
    base = torch.randn(4, 4, device="cuda")
    for layout, view in (("transposed", lambda b: b.t()), ("column slice", lambda b: b[:, :2]),
                         ("contiguous", lambda b: b)):  # fmt: skip
        for name, jit, fn in (("thunder.jit", thunder.jit, copy_doubled), ("thunder_ext.jit", thunder_ext.jit, mul_into)):
            expected, got = base.clone(), base.clone()
            y = torch.randn(view(base).shape, device="cuda")
            fn(view(expected), y)
            jitted = jit(fn)
            jitted(view(got), y)
            print(f"PROBE {name} {fn.__name__} into a {layout} argument: eager's values:",
                  torch.equal(got, expected))  # fmt: skip
            print(thunder.last_traces(jitted)[-1])
            if jit is thunder_ext.jit:
                for decision in thunder_ext.inplace_decisions(jitted):
                    print("PROBE decision:", decision)


if __name__ == "__main__":
    main()
