# Found by the fuzzer around the stand-in nvFuser's regions: the write into r1's view v2 lands at the
# return, after the ops on a0's views, in a region of its own whose input the previous region computes.
# The return named r1 as before the write, so the write's result had no reader and the region no output:
# thunder's rematerialization (which nvFuser's fusion pass runs) raised "The consumer has no outputs".
# The return now names r1 through an update_aliases that reads the write.
import torch


def program(a0, a1, a2, a3):
    a0[a1] = a2
    r1 = a0 * -2.0
    v2 = r1.unsqueeze(0)
    v2.add_(a3)
    v3 = a0[0:1]
    v4 = a0.unsqueeze(0)
    v5 = a0.unsqueeze(0)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 2))
    a1 = torch.tensor([0])
    a2 = torch.randn(())
    a3 = torch.randn(())
    return [a0, a1, a2, a3]
