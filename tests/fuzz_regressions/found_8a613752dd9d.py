# Found by the fuzzer under the torch.compile executor (a long run): `r1.add_(a2)` stayed in its region, whose
# `r3 = r1.clone()` (of the new value) Inductor returned as the written value's own buffer, so the fill of
# `r3` after the region changed `r1` too (torch 2.9.1). torch.compile rule 6: a region returns nothing
# computed from a write's value but views of it.
import torch


def program(a0, a1, a2):
    r1 = a0.clone()
    a0.add_(-2.0)
    r1.add_(a2)
    v2 = a0.unsqueeze(0)
    r3 = r1.clone()
    r3.fill_(-2.0)
    return (r1, r3)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1,))
    a2 = torch.randn(())
    return [a0, a1, a2]
