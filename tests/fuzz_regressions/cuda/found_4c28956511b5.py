# found: with nvFuser the sum of a0, read before a0's write, returned the new value (H100, 2026-11-26): nvFuser runs
# a reduction over size-1 axes as a squeeze, which its alias analysis returns as a view of a0; transforms/aliasing_as_traced.py
# now keeps such copies of written storage out of its regions (confirmed on an H100, 2026-11-26)
# AssertionError: Scalars are not close!
# 
# Expected -0.9246624112129211 but got -0.7438365817070007.
# Absolute difference: 0.1808258295059204 (up to 1e-05 allowed)
# Relative difference: 0.19555875453910046 (up to 1.3e-06 allowed)
# 
# The failure occurred for item [0]
import torch


def program(a0, a1):
    v1 = a0.unsqueeze(0)
    v2 = a0.unsqueeze(0)
    r3 = a0.sum()
    a0.add_(a1)
    return (r3,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn(())
    return [a0, a1]
