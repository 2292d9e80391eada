# found under torch_compile (fuzz, seed 14, 2026-11-27): the class of found_8b056c179fa2 in a scattered intermediate (a differentiated write through diagonal(unsqueeze(r1)).transpose, then r1.zero_()): r1 required no grad, so the backward failed ("element 0 of tensors does not require grad"); fixed with it (zero_ is an overwrite that keeps the history at zero gradient)
# RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn
# grad setting: grad [1]
import torch


def program(a0, a1, a2):
    r1 = a0 * -2.0
    v2 = r1.unsqueeze(0)
    v3 = v2.diagonal()
    v4 = v3.transpose(0, 1)
    v4.mul_(a1)
    r1.zero_()
    r5 = a0 * -2.0
    v6 = r5.squeeze(0)
    v6.mul_(a2)
    v7 = a0.unsqueeze(0)
    v8 = a0.permute((2, 1, 0))
    v9 = a0.unsqueeze(0)
    v10 = v2.unsqueeze(0)
    v11 = r1.unsqueeze(0)
    return (r1, r5)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1, 2))
    a1 = torch.randn(())
    a2 = torch.randn(())
    return [a0, a1, a2]
