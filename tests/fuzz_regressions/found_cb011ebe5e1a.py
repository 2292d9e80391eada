# Found by the fuzzer: views of a0 taken while its zero_ was pending were views of the zeros, not of a0,
# so the fill_ through v1 never reached a0 (wrong values). The functionalizer now lands a write before a view.
import torch


def program(a0, a1):
    a0.zero_()
    v1 = a0.unsqueeze(0)
    v2 = a0.unsqueeze(0)
    a0.fill_(-2.0)
    r3 = v1.sum()
    return (r3,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = a0
    return [a0, a1]
