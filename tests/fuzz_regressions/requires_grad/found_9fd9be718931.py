# found under torch_compile: the compiled program named a value it never defined (NameError), loud (fuzz, seed 11, 2026-11-27): a differentiated value written into an argument that requires no grad, then read through a view taken before the write; fixed: such an argument's storage is scattered into its base before autodiff like an intermediate's (transforms/view_writes.py, `_read_stale_after_a_differentiated_write`), its final value written back
# NameError: name 't114' is not defined
# grad setting: grad [1, 2]
import torch


def program(a0, a1, a2, a3):
    a0.fill_(-2.0)
    v1 = a0.unsqueeze(1)
    r2 = v1 * -2.0
    v3 = r2.select(1, 0)
    v3.mul_(-2.0)
    a0.copy_(a1)
    v4 = v1.unsqueeze(0)
    r5 = v1 * -2.0
    v6 = r5.view(-1)
    v6.mul_(3.0)
    v3[a2] = a3
    v7 = v4.unsqueeze(0)
    return (r2, r5)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2,))
    a1 = torch.randn(())
    a2 = torch.tensor([1, 0])
    a3 = torch.randn((2,))
    return [a0, a1, a2, a3]
