# AssertionError: gradient of argument 3 differs from eager: None mismatch: tensor([0.]) is not None
# grad setting: grad [3, 5]
# Found (thunder's defaults, 2026-11-24): a0's write lands before a1.scatter_, which may fail, and the
# scatter read a1 renamed together with a0's written value; thunder's VJP of that rename gave a3 a zero
# gradient where eager gives none. The scatter now reads its index renamed instead: an integer tensor
# carries no gradient.
import torch


def program(a0, a1, a2, a3, a4, a5):
    a0.scatter_(0, a2, a3)
    a1.scatter_(0, a4, a5)
    v1 = a0.unsqueeze(0)
    r2 = a1.sum()
    v3 = a0.unsqueeze(0)
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1,))
    a2 = torch.rand((1,)).argsort(dim=0).narrow(0, 0, 1)
    a3 = torch.randn((1,))
    a4 = torch.rand((1,)).argsort(dim=0).narrow(0, 0, 1)
    a5 = torch.randn((1,))
    return [a0, a1, a2, a3, a4, a5]
