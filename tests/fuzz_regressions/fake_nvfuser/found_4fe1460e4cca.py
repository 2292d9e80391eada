# found: the clone r4, which the stand-in (as nvFuser) returns as a view of a0, was zeroed, and a0 with it, so the sums
# that are views of a0 read 0 (the stand-in's imitation of nvFuser's aliasing, 2026-11-26); transforms/aliasing_as_traced.py
# now also runs a copy whose own storage is written on the PyTorch executor
# AssertionError: Scalars are not close!
# 
# Expected 1.5409960746765137 but got 0.0.
# Absolute difference: 1.5409960746765137 (up to 1e-05 allowed)
# Relative difference: 1.0 (up to 1.3e-06 allowed)
# 
# The failure occurred for item [0]
import torch


def program(a0, a1):
    r1 = a0.sum()
    r2 = a0 * -2.0
    v3 = a0.unsqueeze(0)
    r4 = a0.clone()
    r5 = a0.sum()
    r4.zero_()
    v6 = a0.unsqueeze(0)
    r7 = a0.sum()
    return (r1, r2, r4, r5, r7)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = a0.view(-1)
    return [a0, a1]
