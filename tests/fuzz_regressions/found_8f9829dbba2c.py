# Found by the fuzzer (torch.compile executor, 2026-11-24): with broadcasting copy_ confined to the extension's
# compilations, stock thunder.jit failed at `a0.copy_(a5)` ("Shapes were expected to be the same") before the
# misapplied aliasing that the extension refuses as thunder's own (aliased-position-on-another-argument).
# Broadcasting copy_ is a fix stock thunder gains from adapt_thunder again.
import torch


def program(a0, a1, a2, a3, a4, a5):
    a2.scatter_(0, a3, a4)
    a0.copy_(a5)
    v1 = a0[0:1]
    r2 = a0.sum()
    v3 = a0.unsqueeze(0)
    v4 = a0.unsqueeze(0)
    v5 = a4.view(-1)
    r6 = a0.sum()
    return (r2, r6)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((4,))
    a1 = torch.randn((1, 1))
    a2 = a1
    a3 = torch.rand((1, 1)).argsort(dim=0).narrow(0, 0, 1)
    a4 = torch.randn((1, 1))
    a5 = torch.randn((1,))
    return [a0, a1, a2, a3, a4, a5]
