# Found by the fuzzer (reduced by hand): copy_ expands a (1,) source inside the op, so the value
# it writes is a view of that source. The write was deferred although the source is written later;
# the functionalizer now counts the views among a write's own ops as aliases of their input.
import torch


def program(a0, a1, a2):
    r1 = a0.sum()
    a0.copy_(a1)
    a1.copy_(a2)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((4,))
    a1 = torch.randn((1,))
    a2 = torch.randn((1,))
    return [a0, a1, a2]
