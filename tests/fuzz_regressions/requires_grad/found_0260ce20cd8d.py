# found under torch_compile (seed 21, 2026-11-27, after about 3,200 programs, at 61ab3e4): thunder's torch.compile fusion pass failed to build a region (RuntimeError: "Trying to add the name t75 to a trace, but that name is already used"), loud: thunder's rematerialization recomputed a rename of several aliases in a region that also received one of its outputs; fixed: such a region takes none of them (thunder_ext/thunder026/rematerialization.py)
# RuntimeError: Trying to add the name t75 to a trace, but that name is already used
# grad setting: grad [3]
import torch


def program(a0, a1, a2, a3):
    v1 = a0.unsqueeze(1)
    r2 = a0 * 3.0
    v3 = r2[2:3]
    v4 = v3.transpose(0, 1)
    v4.relu_()
    r2.index_copy_(0, a2, a0)
    v3[0] = a3
    v5 = a0.transpose(0, 1)
    r6 = v3.sum()
    r7 = v3.sum()
    v5.mul_(0.5)
    return (r2, r6, r7)


def make_args():
    torch.manual_seed(4367)
    a0 = torch.randn((3, 1))
    a1 = torch.randn((3,))
    a2 = torch.tensor([2, 1, 0])
    a3 = torch.randn(())
    return [a0, a1, a2, a3]
