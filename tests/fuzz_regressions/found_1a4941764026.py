# Found by the fuzzer: thunder 0.2.6 has no fill_ ("Unknown attribute fill_"); thunder_ext/thunder026/adapt.py adds it.
import torch


def program(a0, a1):
    a0.fill_(-2.0)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = a0
    return [a0, a1]
