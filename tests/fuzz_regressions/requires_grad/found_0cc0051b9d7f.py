# grad setting: grad [5]
# Found (torch.compile executor): stock thunder fails this backward in Dynamo too (`name 't43' is not defined`),
# but the fuzzer compared failures of the call alone; it now runs the backward of both in the comparison.
import torch


def program(a0, a1, a2, a3, a4, a5):
    a0.scatter_(0, a2, a3)
    a1.scatter_(0, a4, a5)
    v1 = a1.unsqueeze(0)
    r2 = a1.sum()
    v3 = a0.unsqueeze(0)
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1,))
    a2 = torch.rand((1,)).argsort(dim=0).narrow(0, 0, 1)
    a3 = torch.randn((1,))
    a4 = torch.rand((1,)).argsort(dim=0).narrow(0, 0, 1)
    a5 = torch.randn((1,))
    return [a0, a1, a2, a3, a4, a5]
