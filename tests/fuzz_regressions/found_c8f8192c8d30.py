# Found by the fuzzer under the torch.compile executor and the adversarial schedulers (a CI run): one
# region wrote a1, read it (`r2 = a1.sum()`) and wrote the view a1[0:1]; Inductor let the sum see the second
# write (plain torch.compile 2.9.1 too). A torch.compile region now writes a storage once (rule 2).
import torch


def program(a0, a1, a2, a3):
    a1.masked_fill_(a2, -2.0)
    v1 = a1[0:1]
    r2 = a1.sum()
    v3 = a0.transpose(0, 1)
    r4 = a0.clone()
    v1.add_(a3)
    v5 = a0.unsqueeze(0)
    v6 = a0.unsqueeze(0)
    return (r2, r4)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 3))
    a1 = torch.randn((2, 3))
    a2 = torch.rand((2, 3)) < 0.5
    a3 = torch.randn(())
    return [a0, a1, a2, a3]
