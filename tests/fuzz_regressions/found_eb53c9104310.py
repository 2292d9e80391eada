# Found by the fuzzer (twice; reduced by hand): buffer reuse computed `v1 * -2.0` into `v1`, a view
# of the argument a1, which it took for a dead temporary: `torch.narrow` runs in the execution trace
# as an op of thunder's torch executor with no subsymbol, so nothing named it a view. The executor's
# implementation map now says which thunder op such an op runs.
import torch


def program(a0, a1):
    v1 = a1.narrow(0, 0, 1)
    a0.add_(1.5)
    r2 = v1 * -2.0
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((2,))
    return [a0, a1]
