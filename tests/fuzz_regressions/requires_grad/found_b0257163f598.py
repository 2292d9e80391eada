# found under torch_compile: a torch.compile region recomputed a value of an earlier one that the earlier region computed after its write of that storage, which the checker's verification took for a recomputation across the write (InplaceOrderingError), loud (fuzz, seed 11, 2026-11-27); fixed: no_recomputation.recomputations_across_writes counts only writes after the value's first computation, by position inside its region
# thunder_ext.transforms.prove_inplace.InplaceOrderingError: a fusion region recomputes a value across a write: `TorchCompile1` recomputes t69 of `TorchCompile0`, and touches t65 overwritten
# grad setting: grad [2]
import torch


def program(a0, a1, a2):
    a0.fill_(-2.0)
    v1 = a0.unsqueeze(1)
    r2 = v1 * -2.0
    v3 = r2[1]
    v3.mul_(a1)
    r4 = v3.sum(0)
    v5 = a0.unsqueeze(0)
    r6 = a1.clone()
    v3.mul_(a2)
    r7 = a2 * 1.5
    v8 = r7.view(-1)
    v8.mul_(a1)
    return (r2, r4, r6, r7)


def make_args():
    torch.manual_seed(2219)
    a0 = torch.randn((2,))
    a1 = torch.randn((1,))
    a2 = torch.randn((1,))
    return [a0, a1, a2]
