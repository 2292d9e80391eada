# Found by the long fuzz run under the torch.compile executor (and fails under thunder's defaults too):
# a1 is unused, so thunder 0.2.6 applies the alias of a1 and a2 to a2 and a3 and traces a0.copy_(a3) as a
# copy of a2, whose dtype conversion to float32 is now a same-dtype prims.convert_element_type. The PyTorch
# executor runs that as to(..., copy=True), which the checker took for a view of a2: read after the write
# into a2's view v1, an InplaceOrderingError at compile time instead of the documented AliasedArgumentsError.
# A to that copies is now no view (op_kinds.is_view_op).
import torch


def program(a0, a1, a2, a3, a4, a5, a6):
    a0.copy_(a3)
    v1 = a2.narrow(0, 0, 1)
    r2 = a0.clone()
    v1.index_add_(0, a4, a5)
    v3 = v1.view(-1)
    v4 = a0.unsqueeze(0)
    a0.add_(a6)
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2,))
    a1 = torch.randn((2,))
    a2 = a1.view(-1)
    a3 = torch.randn((2,), dtype=torch.float64)
    a4 = torch.tensor([0, 0])
    a5 = torch.randn((2,))
    a6 = torch.randn(())
    return [a0, a1, a2, a3, a4, a5, a6]
