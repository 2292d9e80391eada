# Found by the long fuzz run under the torch.compile executor: a1's new value t2 is written into a1 and,
# by r2.copy_(a1), into r2, which is a clone of t2 made in a region after t2's producer. The checker ran
# r2's write in place at the producer, which then wrote into r2 before r2 existed (UnboundLocalError).
# In place at the producer now needs `out` made before the producer.
import torch


def program(a0, a1):
    a1.add_(-2.0)
    a1[0:1] = -0.5
    r1 = a1.sum(0)
    r2 = a1.clone()
    r2.copy_(a1)
    return (r1, r2)


def make_args():
    torch.manual_seed(65536)
    a0 = torch.randn((1, 3, 1))
    a1 = torch.randn((2,))
    return [a0, a1]
