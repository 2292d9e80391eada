# found: with nvFuser both writes went into one tensor (H200, 2026-11-27): nvFuser's elimination of common
# subexpressions made r3 r1; transforms/aliasing_as_traced.py (rule 2) keeps twins apart where one is written
# thunder_ext.transforms.prove_inplace.InplaceOrderingError: `copy_to_out_` reads `t18`, which shares storage with `t18`, after `t20 = copy_to_out_(..., out=t18)` overwrote it
# grad setting: grad []
import torch


def program(a0, a1):
    r1 = a0 * -2.0
    r2 = a0.sum()
    r3 = a0 * -2.0
    r1.zero_()
    r3.add_(a1)
    return (r1, r2, r3)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn(())
    return [a0, a1]
