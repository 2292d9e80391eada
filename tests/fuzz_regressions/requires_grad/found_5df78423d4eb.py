# found under torch_compile: under inference_mode, views of an argument that requires grad, then writes through it and them: Inductor refused the region the extension built ("A view was created in no_grad mode ... modified inplace"), loud (fuzz, 2026-11-25); fixed 2026-11-27: a torch.compile region keeps no write into an input that requires grad if it returns a view of it made before the write (transforms/regions/torch_compile.py, rule 7)
# torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:
# RuntimeError: A view was created in no_grad mode and its base or another view of its base has been modified inplace with grad mode enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving both the view and the inplace either both inside the no_grad block (if you don't want the inplace to be tracked) or both outside (if you want the inplace to be tracked).
# 
# Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug to PyTorch). For even more developer context, set TORCH_LOGS="+dynamo"
# grad setting: inference_mode [0]
import torch


def program(a0, a1):
    v1 = a0.unsqueeze(0)
    v2 = a0.unsqueeze(0)
    v3 = a0.view(-1)
    a0.add_(-2.0)
    v4 = a0.view(-1)
    v1.zero_()
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    a1 = torch.randn((1,))
    return [a0, a1]
