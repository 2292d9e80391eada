import torch


def program(a0, a1):
    a0.copy_(a0)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1, 1))
    return [a0, a1]
