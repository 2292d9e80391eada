# Found by the fuzzer: a1 is a0 and unused; thunder 0.2.6 replaces the index a2 by a0 and fails
# while tracing ("index dtype=... was not an integer dtype"), before anything is written.
import torch


def program(a0, a1, a2, a3):
    a0.scatter_(0, a2, a3)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = a0
    a2 = torch.rand((1,)).argsort(dim=0).narrow(0, 0, 1)
    a3 = torch.randn((1,))
    return [a0, a1, a2, a3]
