# Found by the fuzzer: thunder 0.2.6's copy_ refused a source that broadcasts to its target
# ("Shapes were expected to be the same"); thunder_ext/thunder026/adapt.py expands it, as torch does.
import torch


def program(a0, a1):
    r1 = a0.sum()
    v2 = a0.unsqueeze(0)
    v3 = a0.unsqueeze(0)
    v4 = a0.unsqueeze(0)
    a0.copy_(a1)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1))
    a1 = torch.randn((1,))
    return [a0, a1]
