# found under defaults (seed 25, 2026-11-27, after 1,587 programs, at 9a5aee7): the scatter of v3.clamp_ into r2, now an in-place index_copy_, landed for a view of r2 whose shape alone r2.fill_ read, so nothing read the write's result and thunder's split put it into the backward (AttributeError in the checker); fixed: functionalize drops a write into an intermediate whose data nothing reads afterwards (`_without_unread_writes`)
# AttributeError: 'list' object has no attribute 'name'
# grad setting: grad [1]
import torch


def program(a0, a1):
    r1 = a0.sum()
    r2 = a0 * -2.0
    v3 = r2.view(-1)
    v3.clamp_(-2.0, 3.0)
    r2.fill_(-2.0)
    a0.add_(a1)
    v4 = a0.unsqueeze(0)
    return (r1, r2)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2,))
    a1 = torch.randn(())
    return [a0, a1]
