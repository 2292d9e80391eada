# grad setting: grad []
# Found: the fuzzer let stock thunder's own, different error escape while comparing failures (fixed in
# program_fuzzer._stock_thunder_fails_alike); the extension's documented refusal is accepted.
import torch


def program(a0, a1, a2):
    a0.copy_(a2)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = a0
    a2 = torch.randn(())
    return [a0, a1, a2]
