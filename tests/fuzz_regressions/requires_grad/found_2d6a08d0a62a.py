# found: a differentiated value (a2) written into an argument that requires no grad (a0.index_copy_(0, a1, a2)), then read through a view of it taken before the write (v1 = a0.unsqueeze(1); r5 = v1 * -2.0): a2's gradient missed that read, silently, under both executor sets (fuzz, torch.compile set, seed 11, 2026-11-27); fixed: such an argument's storage is scattered into its base before autodiff like an intermediate's (transforms/view_writes.py, `_read_stale_after_a_differentiated_write`), its final value written back
# AssertionError: gradient of argument 2 differs from eager: Tensor-likes are not close!
# 
# Mismatched elements: 1 / 1 (100.0%)
# Greatest absolute difference: 6.0 at index (0,) (up to 1e-05 allowed)
# Greatest relative difference: 1.0 at index (0,) (up to 1.3e-06 allowed)
# grad setting: grad [1, 2, 4]
import torch


def program(a0, a1, a2, a3, a4):
    a0.fill_(-2.0)
    v1 = a0.unsqueeze(1)
    r2 = v1 * -2.0
    v3 = r2.select(1, 0)
    v3.mul_(-2.0)
    a0.index_copy_(0, a1, a2)
    v4 = a0.view(-1)
    r5 = v1 * -2.0
    v6 = r5.view(-1)
    v6.mul_(3.0)
    v3[a3] = a4
    v7 = a2.unsqueeze(0)
    return (r2, r5)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2,))
    a1 = torch.tensor([0])
    a2 = torch.randn((1,))
    a3 = torch.tensor([1, 0])
    a4 = torch.randn((2,))
    return [a0, a1, a2, a3, a4]
