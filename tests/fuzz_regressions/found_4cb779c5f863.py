# Found by the fuzzer under the SinkReads scheduler: the checker ran a0's first write in place at its
# producer, so `r1 = a0.sum()` of the value written read a0's storage, but nothing ordered it above the
# second write; sunk below it, the checker refused its own trace (InplaceOrderingError). A write now stays a
# copy when its value is read after a later write to its target (prove_inplace.py, _read_after_overwrite).
import torch


def program(a0):
    a0.add_(-2.0)
    r1 = a0.sum()
    a0.copy_(a0)
    v2 = a0.unsqueeze(0)
    v3 = a0.unsqueeze(0)
    r4 = a0.sum()
    r5 = a0.sum()
    v2.add_(-2.0)
    return (r1, r4, r5)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1, 1))
    return [a0]
