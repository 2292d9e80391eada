# found: with nvFuser the write through r4's diagonal was lost (H100, 2026-11-26): thunder's diagonal is a take, which
# nvFuser returns as a copy; transforms/aliasing_as_traced.py now runs such views of written storage on the PyTorch executor
# AssertionError: Tensor-likes are not close!
# 
# Mismatched elements: 1 / 4 (25.0%)
# Greatest absolute difference: 0.2903677225112915 at index (0, 1, 1) (up to 1e-05 allowed)
# Greatest relative difference: inf at index (0, 1, 1) (up to 1.3e-06 allowed)
# 
# The failure occurred for item [1]
import torch


def program(a0):
    v1 = a0.unsqueeze(0)
    v2 = a0.unsqueeze(0)
    r3 = a0 * 0.5
    r4 = a0 * -2.0
    v5 = r4.unsqueeze(0)
    v6 = v5.diagonal()
    v7 = v6.unsqueeze(0)
    v7.relu_()
    v8 = a0.unsqueeze(0)
    r9 = a0.sum()
    return (r3, r4, r9)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 2, 2))
    return [a0]
