# found under thunder's defaults (fuzz, seed 23, 2026-11-27, after 5,742 programs; at 02d927f too): a diagonal view of an argument that requires no grad, made before a write of it and read after, in a differentiated trace, read the old value, silently (thunder's autodiff makes every diagonal a take, a copy); fixed: such an argument's storage is scattered (transforms/view_writes.py, `_copied_view_read_past_a_write`)
# AssertionError: Scalars are not close!
# 
# Expected -0.45900392532348633 but got 1.5409960746765137.
# Absolute difference: 2.0 (up to 1e-05 allowed)
# Relative difference: 4.357261212070214 (up to 1.3e-06 allowed)
# 
# The failure occurred for item [0]
# grad setting: grad [1]
import torch


def program(a0, a1):
    v1 = a0.diagonal()
    v2 = a0.transpose(0, 1)
    a0.add_(-2.0)
    r3 = v1.sum()
    v4 = a0.unsqueeze(0)
    v5 = a0.unsqueeze(0)
    a0.add_(a1)
    r6 = a0.sum()
    return (r3, r6)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1))
    a1 = torch.randn(())
    return [a0, a1]
