# Found by the fuzzer under the torch.compile executor (a long run): a0's write, taken out of its region, ran
# in place at its producer, so r2 became a0's buffer, and r2's own later write reached a0. The PyTorch
# executor's checker runs a write at its producer only where nothing writes the computed value later.
import torch


def program(a0, a1, a2):
    v1 = a0.view(-1)
    r2 = a0 * -2.0
    a0.copy_(r2)
    v3 = a1.view(-1)
    r2.add_(a2)
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = a0
    a2 = torch.randn(())
    return [a0, a1, a2]
