# Found by the fuzzer: the checker moved a0's index_copy (which reads a3) down to a0's write, below the
# write of a3.add_(a4), so a0 got the new a3 (wrong values). A producer now never moves below a write of
# storage it reads (transforms/prove_inplace.py, _first_overwrite_of_inputs).
import torch


def program(a0, a1, a2, a3, a4):
    v1 = a0.unsqueeze(1)
    a0.index_copy_(0, a2, a3)
    r2 = a1.sum()
    v3 = a3.view(-1)
    a3.add_(a4)
    v4 = a3.unsqueeze(0)
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1))
    a1 = torch.randn((1, 1))
    a2 = torch.tensor([0])
    a3 = torch.randn((1, 1))
    a4 = torch.randn(())
    return [a0, a1, a2, a3, a4]
