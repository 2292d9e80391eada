# Found by the fuzzer around the stand-in nvFuser's regions: a0's write, in a region, must follow
# `r2 = a0.clone()`, so the region took r2 as an input for the write's `after`; r2.fill_ then overwrote
# r2 before that region, and the ordering check took the region for a reader of r2's old value
# (InplaceOrderingError). A region reads what its ops read; `after` only orders.
import torch


def program(a0, a1, a2):
    r1 = a0.sum()
    r2 = a0.clone()
    r2.fill_(-2.0)
    v3 = r2.view(-1)
    v4 = r2.unsqueeze(0)
    r5 = a0.sum()
    a0.add_(a2)
    return (r1, r2, r5)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2,))
    a1 = torch.randn((1,))
    a2 = torch.randn(())
    return [a0, a1, a2]
