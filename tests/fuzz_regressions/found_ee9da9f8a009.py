# Found by the fuzzer, with found_204f8671627b: `v1`, a view of a0 named before `a0.scatter_`, is
# read by `r2.index_copy_` after it; the checker refused the order (InplaceOrderingError).
import torch


def program(a0, a1, a2, a3, a4):
    v1 = a0.view(-1)
    a0[0] = -2.0
    r2 = a1.sum(0)
    v3 = a0.view(-1)
    a0.scatter_(0, a2, a3)
    r2.index_copy_(0, a4, v1)
    v4 = a0.view(-1)
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1, 2))
    a2 = torch.rand((1,)).argsort(dim=0).narrow(0, 0, 1)
    a3 = torch.randn((1,))
    a4 = torch.tensor([0])
    return [a0, a1, a2, a3, a4]
