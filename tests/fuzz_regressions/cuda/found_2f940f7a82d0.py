# known failure under defaults: found by the fuzzer on an H100 with nvFuser (GPU run 9, 2026-11-27, seed 11 or 14), loud: nvFuser's INTERNAL ASSERT 'BFS traversal could not visit some nodes' compiling a segmented region; its backward's region reshapes a gradient, gathers (take), sums and pads; replayed in run 10: without nvFuser eager's values, stock thunder.jit eager's values on CUDA (on a CPU stock thunder's gradient is wrong) (docs/gpu.md, 'Found on the GPU, not fixed'); not fixed
# RuntimeError:  INTERNAL ASSERT FAILED at /workspace/Fuser/csrc/runtime/fusion_kernel_runtime.cpp:476, please report a bug with repro script to NVFuser at https://github.com/NVIDIA/Fuser/issues. 
# Expected thread_pool_error_message.empty() . Detected exception while compiling fusion segments in parallel. Error messages from all threads are printed below.
# 
# Error from segmentation group 2:  INTERNAL ASSERT FAILED at /workspace/Fuser/csrc/bfs.h:261, please report a bug with repro script to NVFuser at https://github.com/NVIDIA/Fuser/issues. 
# BFS traversal could not visit some nodes:  idg{2 4} (from:  idg{62 64 69 71 76 78 83 85 90 92 97 99 104 106 109 111} idg{65 72 79 86 93 100 107 112} idg{63 70 77 84 91 98 105 110}), visited: ( idg{23 27 39 43 49 53 57} idg{3 6 24 28 40 44 50 54 58 59 60 61 66 67 68 73 74 75 80 81 82 87 88 89 94 95 96 101 102 103 108} idg{63 70 77 84 91 98 105 110} idg{65 72 79 86 93 100 107 112} idg{62 64 69 71 76 78 83 85 90 92 97 99 104 106 109 111})
# Exception raised from traverse at /workspace/Fuser/csrc/bfs.h:261 (most recent call first):
# frame #0: nvfuser::nvfCheckFail(char const*, char const*, long, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&) + 0xc2 (0x7ff0f392d4a6 in /tmp/gpu-site/nvfuser_direct/../nvfuser_common/lib/libnvfuser_codegen.so)
# frame #1: nvfuser::nvfErrorFail(char const*, char const*, long, char const*, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&) + 0x45 (0x7ff0f3e80465 in /tmp/gpu-site/nvfuser_direct/../nvfuser_common/lib/libnvfuser_codegen.so)
# grad setting: grad [0]
import torch


def program(a0):
    r1 = a0 * -2.0
    v2 = r1[0:1]
    v3 = v2.unsqueeze(1)
    v4 = v3.unsqueeze(0)
    v4.relu_()
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 2))
    return [a0]
