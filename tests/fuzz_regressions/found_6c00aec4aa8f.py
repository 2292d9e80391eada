# Found by the fuzzer under the torch.compile executor (a long run): in one region, `r3 = a1.sum()` and
# `r1 = a1.clone()` before `a1.masked_fill_` saw the fill (torch 2.9.1 Inductor; plain torch.compile and
# stock thunder with its torch.compile executor do the same). torch.compile rule 3: a region keeps a write
# only where nothing but its own elementwise steps reads the old value in the region.
import torch


def program(a0, a1, a2):
    r1 = a1.clone()
    r2 = a0.sum()
    r3 = a1.sum()
    v4 = a0.unsqueeze(0)
    a1.masked_fill_(a2, -2.0)
    r5 = a0.sum()
    return (r1, r2, r3, r5)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1, 2, 4))
    a2 = torch.rand((4,)) < 0.5
    return [a0, a1, a2]
