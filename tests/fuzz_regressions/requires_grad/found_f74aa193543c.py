# found: thunder 0.2.6 differentiated a write into a view of an intermediate wrongly (the base's cotangent never reaches the written value: its gradient is zeros, stock thunder's none); under this executor the zeros-made gradient lands in a forward region, which the split does not save for the backward (docs/design.md, Limits); fixed by transforms/view_writes.py (a scatter into the base before autodiff)
# UnboundLocalError: cannot access local variable 't50' where it is not associated with a value
# grad setting: grad [2]
import torch


def program(a0, a1, a2):
    r1 = a0.clone()
    v2 = r1.unsqueeze(0)
    v3 = r1.unsqueeze(0)
    v2.scatter_(0, a1, a2)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1))
    a1 = torch.rand((1, 1, 1)).argsort(dim=0).narrow(0, 0, 1)
    a2 = torch.randn((1, 1, 1))
    return [a0, a1, a2]
