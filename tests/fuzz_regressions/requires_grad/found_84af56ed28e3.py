# ValueError: not enough values to unpack (expected 1, got 0)
# grad setting: grad [0]
# Found once in the 10,000-program run under thunder's defaults (2026-11-24, commit 7550009); replayed alone it
# passes, there and at 7a4d4d9: the failure needed state of the long run, which the run did not keep.
import torch


def program(a0):
    r1 = a0.clone()
    return (r1,)


def make_args():
    torch.manual_seed(1)
    a0 = torch.randn((4,))
    return [a0]
