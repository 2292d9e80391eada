# Found by the fuzzer: `v3 = a0.view(-1)` is read by `a3.copy_(v3)` after `a0.scatter_`. Thunder
# renames an alias only before an in-place op on it, so the functionalizer's write of a0 and that
# read were ordered by nothing, and the read landed first. Such an alias is now renamed through
# update_aliases with the write's result.
import torch


def program(a0, a1, a2, a3):
    v1 = a0.view(-1)
    a0[0] = -2.0
    r2 = a1.sum(0)
    v3 = a0.view(-1)
    a0.scatter_(0, a2, a3)
    r2.mul_(-2.0)
    a3.copy_(v3)
    return (r2,)


def make_args():
    torch.manual_seed(48377)
    a0 = torch.randn((1,))
    a1 = torch.randn((3, 4))
    a2 = torch.rand((1,)).argsort(dim=0).narrow(0, 0, 1)
    a3 = torch.randn((1,))
    return [a0, a1, a2, a3]
