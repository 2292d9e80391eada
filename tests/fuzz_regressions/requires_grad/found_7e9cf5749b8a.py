# found under torch_compile (seed 15, 2026-11-27, after 3,918 programs): under no_grad, a masked_fill_ through r6.unsqueeze(0).diagonal(), r6 = v2 * 1.5 of a diagonal v2, was lost (r6 differed from eager in 2 of 8 elements, silently; thunder's defaults right): torch 2.9.1's torch.compile returned the view, made in a region, as a tensor of its own, as it may any chain of two or more views with a diagonal among them (scripts/probe_inductor_view_outputs.py), and the write ran after the region; fixed: such a storage is scattered into its base (transforms/view_writes.py, `_returned_apart_by_inductor`)
# AssertionError: Tensor-likes are not close!
# 
# Mismatched elements: 2 / 8 (25.0%)
# Greatest absolute difference: 1.611205816268921 at index (0, 1) (up to 1e-05 allowed)
# Greatest relative difference: 3.222411632537842 at index (0, 1) (up to 1.3e-06 allowed)
# 
# The failure occurred for item [2]
# grad setting: no_grad [1]
import torch


def program(a0, a1):
    r1 = a0 * 1.5
    v2 = r1.diagonal()
    v3 = v2.diagonal()
    v4 = v3[1:2]
    v4.mul_(-0.5)
    v4.add_(0.5)
    v4.copy_(v4 * 1.5)
    v2.relu_()
    r5 = v4 * 3.0
    r6 = v2 * 1.5
    v7 = r6.unsqueeze(0)
    v8 = v7.diagonal()
    v8.masked_fill_(a1, -0.5)
    return (r1, r5, r6)


def make_args():
    torch.manual_seed(40606)
    a0 = torch.randn((4, 4, 2))
    a1 = torch.rand((4, 1)) < 0.5
    return [a0, a1]
