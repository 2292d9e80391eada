# Found while reducing found_51c0d1be6c9e: `a0.copy_(r1)` was deferred although `r1` is written
# later, and that write to `r1` was taken for the next link of a chain of writes to `a0`. A copy
# source that the program still reaches now lands at once.
import torch


def program(a0):
    r1 = a0.clone()
    a0.copy_(r1)
    r1.add_(1.5)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2,))
    return [a0]
