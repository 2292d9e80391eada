# ValueError: not enough values to unpack (expected 1, got 0)
# grad setting: grad [0]
# Found once in the 10,000-program run under thunder's defaults (2026-11-24, commit 7550009), under the SinkReads
# scheduler, which then moved clear_mutable_collection(cotangents) above the unpacking (tests/helpers.py); these
# lines pick another scheduler: test_each_scheduler_keeps_a_backward_that_returns_its_cotangent runs each.
import torch


def program(a0):
    r1 = a0.clone()
    return (r1,)


def make_args():
    torch.manual_seed(1)
    a0 = torch.randn((4,))
    return [a0]
