# Reduced by hand from a find of the long torch.compile fuzz run: a3, a float64 view into a1, converted for
# a0.copy_ and read after a1.zero_. The checker took the conversion for a view of a3 and raised
# InplaceOrderingError (under both executor sets); it is a tensor of its own, read when it runs.
import torch


def program(a0, a1, a3):
    a0.zero_()
    v1 = a0.unsqueeze(0)
    a0.copy_(a3)
    a1.zero_()
    return ()


def make_args():
    torch.manual_seed(0)
    a1 = torch.randn((4,))
    a0 = torch.randn((1,))
    a3 = a1.view(torch.float64)[1]
    return [a0, a1, a3]
