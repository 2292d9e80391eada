# found under torch_compile (seed 22, 2026-11-27, after about 710 programs, at 4a9e416): the same failure as found_0260ce20cd8d, with no argument requiring grad: `(t30, t31, t32) = update_aliases((t28, t29, v1))` recomputed for t31 and t32 in a region that received t30; fixed with it (thunder_ext/thunder026/rematerialization.py)
# RuntimeError: Trying to add the name t31 to a trace, but that name is already used
# grad setting: grad []
import torch


def program(a0, a1, a2, a3):
    v1 = a0[0:1]
    r2 = v1 * -2.0
    v3 = r2.diagonal()
    v4 = v3.permute((1, 0))
    v4.relu_()
    v4.add_(a2)
    a0.add_(a3)
    v5 = a0.unsqueeze(0)
    v6 = v1.transpose(0, 1)
    v7 = a0.unsqueeze(0)
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 1, 1))
    a1 = a0
    a2 = torch.randn(())
    a3 = torch.randn(())
    return [a0, a1, a2, a3]
