# grad setting: grad [2]
# Hand-reduced from found_1da947db211f.py without aliased arguments: thunder 0.2.6 has no gradient rule for
# prims.index_add, with or without the extension (accepted as program_fuzzer.NO_GRADIENT_RULE).
import torch


def program(a0, a1, a2):
    a0.index_add_(0, a1, a2)
    return (a0 * 2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2,))
    a1 = torch.tensor([0, 0])
    a2 = torch.randn((2,))
    return [a0, a1, a2]
