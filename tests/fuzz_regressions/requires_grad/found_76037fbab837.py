# found: thunder 0.2.6 differentiated a write into a view of an intermediate wrongly (the base's cotangent never reaches the written value: its gradient is zeros, stock thunder's none); under this executor the zeros-made gradient lands in a forward region, which the split does not save for the backward (docs/design.md, Limits); fixed by transforms/view_writes.py (a scatter into the base before autodiff)
# thunder_ext.transforms.prove_inplace.InplaceOrderingError: `mul` reads `t34`, which shares storage with `t34`, after `t53 = copy_to_out_(..., out=t34)` in `TorchCompile0` overwrote it
# grad setting: grad [1]
import torch


def program(a0, a1):
    r1 = a0.clone()
    v2 = r1.unsqueeze(0)
    v3 = r1.unsqueeze(0)
    v2.mul_(a1)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1))
    a1 = torch.randn(())
    return [a0, a1]
