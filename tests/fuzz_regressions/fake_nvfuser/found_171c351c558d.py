# Hand-made beside found_3e1f04b15fb6, for a write into a view of an argument: the write into v lands at
# the return, after the ops on a2's views, in a region of its own that reads only what the region before
# it reads or computes. The return named a0 as before the write, so the write's result had no reader and
# its region no output (thunder's rematerialization raised). Arguments too are now returned by their
# names after the writes into them.
import torch


def program(a0, a1, a2, a3):
    a2.add_(1.0)
    v = a0[0:1]
    v.add_(a1)
    v4 = a2.unsqueeze(0)
    v5 = a2.unsqueeze(0)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 2))
    a1 = torch.randn((1, 2))
    a2 = torch.randn((2, 2))
    a3 = torch.tensor([0])
    return [a0, a1, a2, a3]
