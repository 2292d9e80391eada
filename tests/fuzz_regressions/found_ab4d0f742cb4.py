# Found by the long fuzz run under the torch.compile executor: thunder 0.2.6 applied the alias group of a1
# and its unused duplicate a2 to a1 and a3, so the checker saw a3 share a1's storage, took the conversion of
# a3 for a view of it, and raised InplaceOrderingError at compile time, before the prologue's documented
# refusal (AliasedArgumentsError) could run. A dtype-changing `to` is no view (transforms/op_kinds.py,
# is_view_op); found_8eb3201ec6ac.py is the same with arguments that do share storage.
import torch


def program(a0, a1, a2, a3):
    a0.zero_()
    v1 = a0.unsqueeze(0)
    a0.copy_(a3)
    a1.zero_()
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((3,))
    a2 = a1
    a3 = torch.randn((), dtype=torch.float64)
    return [a0, a1, a2, a3]
