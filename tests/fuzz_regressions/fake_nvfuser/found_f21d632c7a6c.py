# found on an H200 (cuda/found_f21d632c7a6c.py) and replayed by the stand-in, whose fusion pass eliminates common
# subexpressions as nvFuser's does (2026-11-27): without rule 2 of transforms/aliasing_as_traced.py it fails as there
import torch


def program(a0):
    r1 = a0 * -2.0
    r2 = a0.sum()
    r3 = a0 * -2.0
    r1.zero_()
    return (r1, r2, r3)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    return [a0]
