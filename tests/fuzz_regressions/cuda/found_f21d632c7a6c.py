# found: with nvFuser r3 came back zeroed (H200, 2026-11-27): nvFuser's elimination of common subexpressions made
# r3 r1, which the write then zeroed; transforms/aliasing_as_traced.py (rule 2) keeps twins apart where one is written
# AssertionError: Tensor-likes are not close!
# 
# Mismatched elements: 1 / 1 (100.0%)
# Greatest absolute difference: 1.8493248224258423 at index (0,) (up to 1e-05 allowed)
# Greatest relative difference: 1.0 at index (0,) (up to 1.3e-06 allowed)
# 
# The failure occurred for item [2]
# grad setting: grad []
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
