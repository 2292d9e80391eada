# grad setting: grad [0, 2, 3, 4]
# Found: eager's gradients are no reference where arguments alias (separate tensors over one storage, which its
# autograd does not know to share): thunder, stock and with the extension, gave the right ones. Arguments that
# alias no longer require grad in the fuzzer (program_fuzzer._with_grad).
import torch


def program(a0, a1, a2, a3, a4, a5):
    a1.scatter_(0, a2, a3)
    v1 = a1[3:4]
    a0.index_copy_(2, a4, a5)
    r2 = a0.sum()
    v3 = v1.select(2, 1)
    r4 = a1.sum(0)
    v5 = a3.transpose(0, 1)
    v6 = r4.transpose(0, 1)
    return (r2, r4)


def make_args():
    torch.manual_seed(28)
    a0 = torch.randn((4, 3, 3))
    a1 = a0
    a2 = torch.rand((4, 3, 3)).argsort(dim=0).narrow(0, 0, 1)
    a3 = torch.randn((1, 3, 3))
    a4 = torch.tensor([2])
    a5 = torch.randn((4, 3, 1))
    return [a0, a1, a2, a3, a4, a5]
