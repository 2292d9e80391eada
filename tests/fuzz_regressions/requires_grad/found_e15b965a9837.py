# found under SinkReads: a setitem and a fill_ of an argument that requires no grad, in a differentiated trace: the fill's full_like took the setitem's result for its shape alone, so functionalize left the setitem out of the write's `after`, and once thunder traced the full_like as a full of constants nothing ordered the setitem before the write (InplaceOrderingError, loud); fixed: `after` skips only readers whose data the computed value reads (op_kinds.decomposed_data_args)
# thunder_ext.transforms.prove_inplace.InplaceOrderingError: `copy_with_setitem_impl` reads `t46`, which shares storage with `t46`, after `t55 = copy_to_out_(..., out=t46)` overwrote it
# grad setting: grad [0]
import torch


def program(a0, a1):
    a1[0] = -2.0
    r1 = a0.sum()
    v2 = a0.unsqueeze(0)
    r3 = a1.sum()
    a1.fill_(-2.0)
    return (r1, r3)


def make_args():
    torch.manual_seed(1)
    a0 = torch.randn((1,))
    a1 = torch.randn((1,))
    return [a0, a1]
