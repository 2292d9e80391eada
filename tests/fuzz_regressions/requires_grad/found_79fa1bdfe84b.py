# ValueError: not enough values to unpack (expected 3, got 0)
# grad setting: grad [3]
import torch


def program(a0, a1, a2, a3):
    r1 = a1.clone()
    a0.masked_fill_(a2, 0.5)
    r2 = r1.sum(0)
    r2.copy_(r2)
    r2.copy_(a3)
    r3 = a0.sum()
    return (r1, r2, r3)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((3, 4))
    a1 = torch.randn((3, 4))
    a2 = torch.rand((4,)) < 0.5
    a3 = torch.randn((4,))
    return [a0, a1, a2, a3]
