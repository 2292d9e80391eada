# AssertionError: gradient of argument 2 differs from eager: Scalars are not close!
# 
# Expected 1.2475671768188477 but got -2.718186140060425.
# Absolute difference: 3.9657533168792725 (up to 1e-05 allowed)
# Relative difference: 3.17878939953477 (up to 1.3e-06 allowed)
# grad setting: grad [2]
import torch


def program(a0, a1, a2):
    a0.add_(a1)
    v1 = a0.view(-1)
    a0.mul_(a2)
    r2 = a0.sum()
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn(())
    a2 = torch.randn(())
    return [a0, a1, a2]
