# found: under the torch.compile executor, a write through the diagonal of a one-element intermediate gave its
# base zero gradient: torch 2.9.1's Inductor loses an index_add's contribution beside another term on one
# element (`g * 2 + torch.index_add(torch.zeros_like(g), 0, idx, 3 * g)` compiles to 2, eager 5; stock thunder
# with that executor alike); fixed in transforms/view_writes.py (a one-element base's views are reshapes)
# AssertionError: gradient of argument 0 differs from eager: Tensor-likes are not close!
# 
# Mismatched elements: 1 / 1 (100.0%)
# Greatest absolute difference: 4.0 at index (0,) (up to 1e-05 allowed)
# Greatest relative difference: 0.6666666865348816 at index (0,) (up to 1.3e-06 allowed)
# grad setting: grad [0]
import torch


def program(a0):
    v1 = a0.unsqueeze(0)
    r2 = a0 * -2.0
    v3 = r2.unsqueeze(0)
    v4 = v3.diagonal()
    v5 = v4.unsqueeze(0)
    v5.mul_(-2.0)
    r6 = a0.sum()
    r7 = a0.sum()
    return (r2, r6, r7)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    return [a0]
