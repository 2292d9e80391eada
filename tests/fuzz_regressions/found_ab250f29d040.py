# Found by the fuzzer: a1 is a0 and unused, and stock thunder 0.2.6 replaced a2 by a0 (wrong values).
# thunder_ext.jit raises AliasedArgumentsError.
import torch


def program(a0, a1, a2):
    a0.add_(a2)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = a0
    a2 = torch.randn((1,))
    return [a0, a1, a2]
