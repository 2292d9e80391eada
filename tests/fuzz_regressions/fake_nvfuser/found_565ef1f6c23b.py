# Found by the fuzzer around the stand-in nvFuser's regions: a0's write was given back from its region,
# which returned v1, a view of the written a0. Rebuilt without the write, the region made v1 a view of
# the computed value, a buffer of its own since the write stayed a copy, and v1.add_ missed a0. A region
# that returns a view of a written value is now split at the write, as a region that runs in order is.
import torch


def program(a0, a1, a2, a3):
    a0.add_(a2)
    v1 = a0[:, 0:]
    r2 = a0.sum()
    r3 = a1.sum()
    v1.add_(a3)
    return (r2, r3)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1))
    a1 = a0
    a2 = torch.randn((1, 1))
    a3 = torch.randn(())
    return [a0, a1, a2, a3]
