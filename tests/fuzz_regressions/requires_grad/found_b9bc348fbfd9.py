# found under torch_compile: the same class as found_5df78423d4eb under no_grad (a view of an argument that requires grad, the argument written, the view written after, in one region): Inductor refused the region ("A view was created in no_grad mode ... modified inplace with grad mode enabled"), loud (fuzz, seed 13, 2026-11-27); fixed: rule 7 of transforms/regions/torch_compile.py
# torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:
# RuntimeError: A view was created in no_grad mode and its base or another view of its base has been modified inplace with grad mode enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving both the view and the inplace either both inside the no_grad block (if you don't want the inplace to be tracked) or both outside (if you want the inplace to be tracked).
# 
# Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug to PyTorch). For even more developer context, set TORCH_LOGS="+dynamo"
# grad setting: no_grad [0]
import torch


def program(a0):
    v1 = a0.unsqueeze(0)
    a0.add_(-2.0)
    r2 = a0.sum()
    v1.zero_()
    return (r2,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    return [a0]
