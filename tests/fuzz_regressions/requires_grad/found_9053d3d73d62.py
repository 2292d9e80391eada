# grad setting: grad [5]
# Found (torch.compile executor): stock thunder and the extension both fail in Dynamo (`name 't45' is not defined`),
# with texts that differ only in numbers; and eager's gradients are no reference where arguments alias. Arguments
# that alias no longer require grad in the fuzzer (program_fuzzer._with_grad).
import torch


def program(a0, a1, a2, a3, a4, a5):
    a0.scatter_(0, a2, a3)
    a1.scatter_(0, a4, a5)
    v1 = a0.unsqueeze(0)
    r2 = a1.sum()
    v3 = a0.unsqueeze(0)
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = a0
    a2 = torch.rand((1,)).argsort(dim=0).narrow(0, 0, 1)
    a3 = torch.randn((1,))
    a4 = torch.rand((1,)).argsort(dim=0).narrow(0, 0, 1)
    a5 = torch.randn((1,))
    return [a0, a1, a2, a3, a4, a5]
