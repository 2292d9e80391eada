# found: thunder 0.2.6 differentiated a write into a view of an intermediate wrongly (fill_ of r1.unsqueeze(0), r1 = a0.clone(): the gradient of a0 is 1 where eager's is 0; stock thunder.jit the same; docs/design.md, Limits); fixed by transforms/view_writes.py (a scatter into the base before autodiff)
# AssertionError: gradient of argument 0 differs from eager: Tensor-likes are not close!
# 
# Mismatched elements: 1 / 1 (100.0%)
# Greatest absolute difference: 1.0 at index (0,) (up to 1e-05 allowed)
# Greatest relative difference: inf at index (0,) (up to 1.3e-06 allowed)
# grad setting: grad [0]
import torch


def program(a0):
    r1 = a0.clone()
    v2 = r1.unsqueeze(0)
    v3 = a0.unsqueeze(0)
    v2.fill_(-2.0)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    return [a0]
