# found: with writes through views scattered into their base, the narrow of the written view, read again, put
# narrow's backward into a torch.compile region, which Dynamo cannot compile ("Attempted to call function marked
# as skipped", optree's flatten in thunder's narrow_vjp); views of a scattered base are now made anew, narrow as
# the slice it is
# grad setting: grad [0]
import torch


def program(a0, a1):
    v1 = a0.view(-1)
    v2 = a0[2:3]
    v3 = v2.unsqueeze(0)
    r4 = a0 * -2.0
    v5 = r4.narrow(0, 0, 3)
    v5.masked_fill_(a1, -0.5)
    v6 = v1[1:2]
    r7 = v3 * 0.5
    v8 = r7.squeeze(0)
    v8.fill_(1.5)
    v9 = v8.view(-1)
    return (r4, r7)


def make_args():
    torch.manual_seed(6449)
    a0 = torch.randn((3,))
    a1 = torch.rand((3,)) < 0.5
    return [a0, a1]
