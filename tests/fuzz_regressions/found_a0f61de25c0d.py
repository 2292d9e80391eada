# Found by the fuzzer: the write through v1, a view taken while a0's zero_ was pending, was lost (wrong
# values): the view was of the zeros, not of a0. The functionalizer now lands a write before a view.
import torch


def program(a0, a1):
    a0.zero_()
    v1 = a0.unsqueeze(0)
    v2 = a0.unsqueeze(0)
    v3 = a0.view(-1)
    v4 = a0.view(-1)
    v1.fill_(-2.0)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = a0
    return [a0, a1]
