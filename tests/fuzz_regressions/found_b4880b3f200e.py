# Found by the fuzzer: a0 is passed again as a2 after a1, which the function never reads. thunder
# 0.2.6 applies the alias positions of the call (0, 2) to the computation's arguments, which drop a1,
# so it traced a0 and a2 as unrelated tensors and a2.sum() read a0 before its zero_. Such a call is
# now refused (AliasedArgumentsError) with every input untouched.
import torch


def program(a0, a1, a2):
    a0.zero_()
    r1 = a2.sum()
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1,))
    a2 = a0
    return [a0, a1, a2]
