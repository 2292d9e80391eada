# found_3e1f04b15fb6 with r1 not returned: the write into v2 is dead, and its region had no output all
# the same. A write to storage that nothing observes afterwards is now dropped.
import torch


def program(a0, a1, a2, a3):
    a0[a1] = a2
    r1 = a0 * -2.0
    v2 = r1.unsqueeze(0)
    v2.add_(a3)
    v4 = a0.unsqueeze(0)
    v5 = a0.unsqueeze(0)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 2))
    a1 = torch.tensor([0])
    a2 = torch.randn(())
    a3 = torch.randn(())
    return [a0, a1, a2, a3]
