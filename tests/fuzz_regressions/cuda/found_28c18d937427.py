# known failure under defaults: found by the fuzzer on an H100 with nvFuser (GPU run 9, 2026-11-27, seed 11 or 14), silent: r1[1] came back relu(r1[0]) where eager gives relu(r1[1]); replayed in run 10 (without nvFuser and with stock thunder.jit eager's values) but passed once under pytest in run 10. The trace's two writes through views of r1 are scatters into r1 flattened (transforms/view_writes.py); nvFuser computes either `t48 = unsqueeze(r1[1:2])`, a region output, or `slice(reshape(t82, (2, 2, 3)))[1:2]` of a region input at the offset of r1[0] (docs/gpu.md, 'Found on the GPU, not fixed'); not fixed
# AssertionError: Tensor-likes are not close!
# 
# Mismatched elements: 6 / 12 (50.0%)
# Greatest absolute difference: 3.1386077404022217 at index (1, 0, 2) (up to 1e-05 allowed)
# Greatest relative difference: inf at index (1, 1, 2) (up to 1.3e-06 allowed)
# 
# The failure occurred for item [0]
# grad setting: grad []
import torch


def program(a0, a1):
    r1 = a0 * -2.0
    v2 = r1[1:2]
    v3 = v2.unsqueeze(0)
    v4 = v3.diagonal()
    v4.relu_()
    r5 = a0.sum()
    v2.relu_()
    v6 = a0.permute((2, 1, 0))
    r7 = a0.sum()
    r8 = a0.sum()
    v9 = a0.unsqueeze(0)
    return (r1, r5, r7, r8)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 2, 3))
    a1 = a0
    return [a0, a1]
