# known failure: aliased arguments that thunder would misapply (an unused argument) fail while a fusion pass compiles, with CopyToOutError, before the prologue's AliasedArgumentsError can refuse them (docs/design.md, Limits)
# thunder_ext.primitive.CopyToOutError: copy_to_out_: cannot write `t80` into `t79`: dtype thunder.dtypes.int64 vs thunder.dtypes.float32
import torch


def program(a0, a1, a2, a3, a4):
    v1 = a2.unsqueeze(0)
    r2 = a2.sum()
    a2[a3] = -2.0
    r3 = a2 * -2.0
    a2.copy_(a4)
    v4 = a2.unsqueeze(0)
    v5 = a2.unsqueeze(0)
    v6 = a2.transpose(0, 1)
    return (r2, r3)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1, 1))
    a2 = a1
    a3 = torch.tensor([0])
    a4 = torch.randn(())
    return [a0, a1, a2, a3, a4]
