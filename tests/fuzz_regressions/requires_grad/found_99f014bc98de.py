# found under thunder's defaults (fuzz, seed 21, 2026-11-27; at 02d927f too): a differentiated value written into an argument that requires no grad, then overwritten by zero_ (a1.add_(a2); a1.zero_()): the output required no grad, so its backward failed ("element 0 of tensors does not require grad"). eager's graph keeps the overwritten value's history at zero gradient; zero_'s zeros_like(a1) reads a1's shape only, yet counted as a read of the old value, so the history was not kept; fixed: gradients.overwrites_of_differentiated_values counts data read by the prims (op_kinds.decomposed_data_args)
# RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn
# grad setting: grad [2]
import torch


def program(a0, a1, a2):
    a1.add_(a2)
    a1.zero_()
    r1 = a1 * -2.0
    v2 = r1.unsqueeze(0)
    v2.relu_()
    v3 = a0.unsqueeze(0)
    v4 = a0.unsqueeze(0)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1,))
    a2 = torch.randn(())
    return [a0, a1, a2]
