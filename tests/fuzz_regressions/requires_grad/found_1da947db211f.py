# grad setting: grad [0, 1, 4]
# Found: thunder 0.2.6 has no gradient rule for prims.index_add (accepted as program_fuzzer.NO_GRADIENT_RULE; its
# arguments alias, so they no longer require grad here: found_index_add_gradient.py keeps the case).
import torch


def program(a0, a1, a2, a3, a4):
    a0.index_add_(0, a3, a4)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1,))
    a2 = a0
    a3 = torch.tensor([0, 0])
    a4 = torch.randn((2,))
    return [a0, a1, a2, a3, a4]
