# Found by the fuzzer under the torch.compile executor (a long run): `r1.add_(a2)` stayed in its region, which
# returned `r4 = r1.clone()`; Inductor returned the clone as the written value's own buffer, so the fill of
# `r1` after the region changed `r4` too (torch 2.9.1; stock thunder with the executor matches eager).
# torch.compile rule 6: a region returns nothing computed from a write's value but views of it.
import torch


def program(a0, a1, a2):
    r1 = a1.clone()
    r1.add_(a2)
    v2 = a0.unsqueeze(0)
    v3 = r1[0:1]
    r4 = r1.clone()
    r1.fill_(-2.0)
    return (r1, r4)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((2,))
    a2 = torch.randn(())
    return [a0, a1, a2]
