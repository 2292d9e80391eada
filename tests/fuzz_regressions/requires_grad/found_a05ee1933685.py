# found: a base written through a view by a differentiated op, then wholly overwritten (`r1.copy_(a3)`): eager's
# graph keeps the old history (zero gradients, and the result requires grad); thunder's functional form dropped it
# (stock thunder.jit alike; fuzz, 2026-11-26); fixed by keeping the old value at zero gradient (traced.keeping_history)
# AssertionError: gradient of argument 0 differs from eager: None mismatch: None is not tensor([[-0., 0.]])
# grad setting: grad [0, 3]
import torch


def program(a0, a1, a2, a3):
    r1 = a0 * -2.0
    v2 = r1.unsqueeze(0)
    v2.mul_(a2)
    v3 = a0.permute((1, 0))
    r1.copy_(a3)
    v4 = a2.view(-1)
    v5 = a1.transpose(0, 1)
    return (r1,)


def make_args():
    torch.manual_seed(272)
    a0 = torch.randn((1, 2))
    a1 = torch.randn((2, 3, 3))
    a2 = torch.randn((2,))
    a3 = torch.randn(())
    return [a0, a1, a2, a3]
