# found under torch_compile (seed 24, 2026-11-28, after about 3,090 programs, at be1d9ba): Inductor (torch 2.9.1, this x86_64 CPU's AVX-512 code) failed to compile the backward region, found_0cd5fce8f9aa's class in its simplest form: the scatter's value gradient, a take of the base's flattened gradient at the written positions, padded by the select's backward in the same region (CppCompileError, VecMask<int64_t, 2>(bool)), loud; stock thunder.jit with the executor fails on the program too (KeyError); fixed: the scatter's value gradient is the written view of the base's gradient, not a gather (transforms/view_scatter.py)
# torch._inductor.exc.InductorError: CppCompileError: C++ compile error
# 
# Command:
# g++ /tmp/torchinductor_root/7z/c7zo3fho2g6bemyfc7yljymvwbryb2t7sqf6lndsxey7l4cpchzn.main.cpp -D TORCH_INDUCTOR_CPP_WRAPPER -D STANDALONE_TORCH_HEADER -D C10_USING_CUSTOM_GENERATED_MACROS -D CPU_CAPABILITY_AVX512 -O3 -DNDEBUG -fno-trapping-math -funsafe-math-optimizations -ffinite-math-only -fno-signed-zeros -fno-math-errno -fno-finite-math-only -fno-unsafe-math-optimizations -ffp-contract=off -fexcess-precision=fast -fno-tree-loop-vectorize -march=native -shared -fPIC -Wall -std=c++17 -Wno-unused-variable -Wno-unknown-pragmas -pedantic -fopenmp -include /tmp/torchinductor_root/precompiled_headers/cav2yc677fqt6ob2ezbcytjw5q4omtydd4dqb4jbodbwdm4b4pkr.h -I/root/.pyenv/versions/3.11.7/include/python3.11 -I/work/main/.venv/lib/python3.11/site-packages/torch/include -I/work/main/.venv/lib/python3.11/site-packages/torch/include/torch/csrc/api/include -mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma -mamx-tile -mamx-bf16 -mamx-int8 -mavx512bf16 -o /tmp/torchinductor_root/7z/c7zo3fho2g6bemyfc7yljymvwbryb2t7sqf6lndsxey7l4cpchzn.main.so -ltorch -ltorch_cpu -ltorch_python -lgomp -lc10 -L/root/.pyenv/versions/3.11.7/lib -L/work/main/.venv/lib/python3.11/site-packages/torch/lib
# 
# Output:
# In file included from /work/main/.venv/lib/python3.11/site-packages/torch/include/c10/macros/Macros.h:1,
#                  from /work/main/.venv/lib/python3.11/site-packages/torch/include/ATen/NumericUtils.h:7,
# grad setting: grad [0]
import torch


def program(a0, a1):
    r1 = a0 * -2.0
    v2 = r1.transpose(0, 1)
    v3 = v2.select(1, 0)
    v3.mul_(-2.0)
    return (r1,)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2, 4, 4))
    a1 = torch.randn((1,))
    return [a0, a1]
