# known failure under defaults: found by the fuzzer on an H100 with nvFuser (GPU run 9, 2026-11-27, seed 11 or 14), loud: nvFuser's INTERNAL ASSERT 'BFS traversal could not visit some nodes' compiling a segment of the region that reshapes the scattered r1 back, sums a0 and slices it (found_28c18d937427's program at a0 of shape (2, 1, 3)); replayed in run 10: without nvFuser and with stock thunder.jit eager's values (docs/gpu.md, 'Found on the GPU, not fixed'); not fixed
# RuntimeError:  INTERNAL ASSERT FAILED at /workspace/Fuser/csrc/runtime/fusion_kernel_runtime.cpp:476, please report a bug with repro script to NVFuser at https://github.com/NVIDIA/Fuser/issues. 
# Expected thread_pool_error_message.empty() . Detected exception while compiling fusion segments in parallel. Error messages from all threads are printed below.
# 
# Error from segmentation group 3:  INTERNAL ASSERT FAILED at /workspace/Fuser/csrc/bfs.h:261, please report a bug with repro script to NVFuser at https://github.com/NVIDIA/Fuser/issues. 
# BFS traversal could not visit some nodes:  idg{8 15} (from:  idg{39 41 45 47 51 53 57 59 69 71} idg{42 48 54 60 72} idg{40 46 52 58 70}), visited: ( idg{9 17 20 23 29 35} idg{10 18 21 24 30 36 37 38 43 44 49 50 55 56 61 67 68} idg{40 46 52 58 70} idg{42 48 54 60 72} idg{39 41 45 47 51 53 57 59 69 71})
# Exception raised from traverse at /workspace/Fuser/csrc/bfs.h:261 (most recent call first):
# frame #0: nvfuser::nvfCheckFail(char const*, char const*, long, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&) + 0xc2 (0x7f41df92d4a6 in /tmp/gpu-site/nvfuser_direct/../nvfuser_common/lib/libnvfuser_codegen.so)
# frame #1: nvfuser::nvfErrorFail(char const*, char const*, long, char const*, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&) + 0x45 (0x7f41dfe80465 in /tmp/gpu-site/nvfuser_direct/../nvfuser_common/lib/libnvfuser_codegen.so)
# grad setting: grad []
import torch


def program(a0, a1):
    r1 = a0 * -2.0
    v2 = r1[1:2]
    v3 = v2.unsqueeze(0)
    v4 = v3.diagonal()
    v4.relu_()
    r5 = a0.sum()
    v2.relu_()
    v6 = a0.permute((2, 1, 0))
    r7 = a0.sum()
    r8 = a0.sum()
    v9 = a0.unsqueeze(0)
    return (r1, r5, r7, r8)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 1, 3))
    a1 = a0
    return [a0, a1]
