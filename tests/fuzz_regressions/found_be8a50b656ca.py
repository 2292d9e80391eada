# Found by the fuzzer under the torch.compile executor: `a0.copy_(a0)` gave back a write whose producer in
# its region was an `update_aliases`, which the give-back tried to move to the PyTorch executor and failed
# (`unhashable type: TensorProxy`). Only a tensor-valued producer leaves a region with its write now.
import torch


def program(a0, a1):
    a0.copy_(a0)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1, 1))
    return [a0, a1]
