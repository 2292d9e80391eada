# found: with nvFuser the write through r3's transpose swapped r3's off-diagonal elements (H200, 2026-11-27): nvFuser
# wrote the alias output in the view's logical order; rule 6 of transforms/regions/nvfuser.py gives such a write back
# AssertionError: Tensor-likes are not close!
# 
# Mismatched elements: 2 / 4 (50.0%)
# Greatest absolute difference: 0.8023247718811035 at index (0, 1) (up to 1e-05 allowed)
# Greatest relative difference: 5.2157793045043945 at index (0, 1) (up to 1.3e-06 allowed)
# 
# The failure occurred for item [1]
import torch


def program(a0, a1):
    r1 = a0.sum()
    v2 = a0.unsqueeze(0)
    r3 = a0 * -2.0
    v4 = r3.transpose(0, 1)
    v4.mul_(a1)
    return (r1, r3)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 2))
    a1 = torch.randn(())
    return [a0, a1]
