# Found by the fuzzer: the functionalizer renamed values, not tensors. After `a0.copy_(r1)`, the
# write of `a0.add_` renamed `r1` too, so `r1` and its clone read the new `a0`. Names now resolve
# through the tensor they denote.
import torch


def program(a0, a1):
    r1 = a0.clone()
    a0.copy_(r1)
    a0.add_(-0.5)
    r2 = r1.clone()
    v3 = r1.narrow(0, 0, 1)
    r1.masked_fill_(a1, 1.5)
    v3.mul_(-2.0)
    r4 = r2.sum()
    return (r1, r2, r4)


def make_args():
    torch.manual_seed(1119)
    a0 = torch.randn((2,))
    a1 = torch.rand((2,)) < 0.5
    return [a0, a1]
