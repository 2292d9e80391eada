# found with refuse_arguments_sharing_written_state taken out of the pipeline on purpose (2026-11-28): the
# module's read of its buffer before `a0.copy_(a2)` (ReadingState's `before`) gave the value after it, all 8
# elements off; with the rule, the call is refused as aliased-with-a-global, nothing written
import torch


def program(a0, a1, a2):
    r1 = a1.sum()
    r2 = a0 * -2.0
    r3 = a0.clone()
    a0.copy_(a2)
    r4 = a0 * -0.5
    v5 = r4.transpose(0, 1)
    v5.relu_()
    r6 = a1.sum()
    v7 = r3.transpose(0, 1)
    return (r1, r2, r3, r4, r6)


def make_args():
    torch.manual_seed(681)
    a0 = torch.randn((2, 4, 2))
    a1 = torch.randn((1,))
    a2 = torch.randn((1, 2), dtype=torch.float64)
    return [a0, a1, a2]
