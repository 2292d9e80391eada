# grad setting: grad [5]
# Found (torch.compile executor): thunder's fusion pass built a region that takes a name it also computes
# (`Trying to add the name t113 to a trace, but that name is already used`); stock thunder fails earlier on these
# aliased arguments. Arguments that alias no longer require grad in the fuzzer (program_fuzzer._with_grad): the
# extension refuses this call (a1 duplicates the unused a0), as without grad.
import torch


def program(a0, a1, a2, a3, a4, a5):
    a1.scatter_(0, a2, a3)
    a3.scatter_(0, a4, a5)
    v1 = a1[0:1]
    v2 = a1.unsqueeze(0)
    v3 = a1.unsqueeze(0)
    v4 = a1.view(-1)
    v5 = a1.narrow(0, 0, 1)
    v6 = a1.unsqueeze(1)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((4, 1))
    a1 = a0
    a2 = torch.rand((4, 1)).argsort(dim=0).narrow(0, 0, 1)
    a3 = torch.randn((1, 1))
    a4 = torch.rand((1, 1)).argsort(dim=0).narrow(0, 0, 1)
    a5 = torch.randn((1, 1))
    return [a0, a1, a2, a3, a4, a5]
