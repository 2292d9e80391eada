# found under torch_compile (fuzz, seed 13, 2026-11-27): thunder's torch.compile executor fused narrow's backward (`narrow_vjp` of a narrow of an argument that requires grad) into a region that Dynamo could not trace ("Unsupported: ... optree ... flatten"), depending on the process's earlier compilations (stock thunder.jit alike where its regions take narrow_vjp); fixed: transforms/narrow_as_slice.py traces a narrow as the slice it is where the trace is differentiated
# torch._dynamo.exc.Unsupported: Attempted to call function marked as skipped
#   Explanation: Dynamo cannot trace optree C/C++ function optree._C.pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1.flatten.
#   Hint: Consider using torch.utils._pytree - https://github.com/pytorch/pytorch/blob/main/torch/utils/_pytree.py
# 
#   Developer debug context: module: optree._C, qualname: pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1.flatten, skip reason: <missing reason>
# 
#  For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html
# 
# grad setting: grad [0]
import torch


def program(a0):
    v1 = a0.narrow(0, 0, 1)
    v2 = a0.view(-1)
    r3 = a0.sum()
    r4 = v1 * -2.0
    v5 = r4.unsqueeze(0)
    v5.fill_(-2.0)
    return (r3, r4)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((3,))
    return [a0]
