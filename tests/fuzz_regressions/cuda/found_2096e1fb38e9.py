# found: with nvFuser the write through r1.diagonal() was lost (H100, 2026-11-26): thunder's diagonal is a take, which
# nvFuser returns as a copy; transforms/aliasing_as_traced.py now runs such views of written storage on the PyTorch executor
# AssertionError: Tensor-likes are not close!
# 
# Mismatched elements: 1 / 1 (100.0%)
# Greatest absolute difference: 3.8493247032165527 at index (0, 0) (up to 1e-05 allowed)
# Greatest relative difference: 1.9246623516082764 at index (0, 0) (up to 1.3e-06 allowed)
# 
# The failure occurred for item [0]
# grad setting: grad []
import torch


def program(a0, a1):
    r1 = a0 * -2.0
    v2 = r1.diagonal()
    v2.fill_(-2.0)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1))
    a1 = a0
    return [a0, a1]
