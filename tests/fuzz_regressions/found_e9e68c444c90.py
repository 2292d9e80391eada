# Found by the fuzzer: a1 is a0, whose only use is dead; thunder 0.2.6 replaces a2 by a0 and fails while
# tracing ("Shapes were expected to be the same"), before anything is written.
import torch


def program(a0, a1, a2):
    v1 = a0.transpose(0, 1)
    a1.copy_(a2)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1))
    a1 = a0
    a2 = torch.randn((1,))
    return [a0, a1, a2]
