# found under torch_compile (seed 20, 2026-11-27, after 566 programs, at 09b077e): Inductor (torch 2.9.1, this x86_64 CPU's AVX-512 code) failed to compile the backward region that pads the gradient of r1[1] around a masked index_select of the scattered base's flattened gradient (CppCompileError: no VecMask<int64_t, 2>(bool)), loudly; stock thunder.jit with the executor fails too (KeyError); fixed: the scatter's value gradient is the written view of the base's gradient, not a gather (transforms/view_scatter.py)
# torch._inductor.exc.InductorError: CppCompileError: C++ compile error
# 
# Command:
# g++ /tmp/torchinductor_root/26/c26iubybfuqa4ugjymazjqwd43qzaiew3utlgkxsr27wreic46ww.main.cpp -D TORCH_INDUCTOR_CPP_WRAPPER -D STANDALONE_TORCH_HEADER -D C10_USING_CUSTOM_GENERATED_MACROS -D CPU_CAPABILITY_AVX512 -O3 -DNDEBUG -fno-trapping-math -funsafe-math-optimizations -ffinite-math-only -fno-signed-zeros -fno-math-errno -fno-finite-math-only -fno-unsafe-math-optimizations -ffp-contract=off -fexcess-precision=fast -fno-tree-loop-vectorize -march=native -shared -fPIC -Wall -std=c++17 -Wno-unused-variable -Wno-unknown-pragmas -pedantic -fopenmp -include /tmp/torchinductor_root/precompiled_headers/cav2yc677fqt6ob2ezbcytjw5q4omtydd4dqb4jbodbwdm4b4pkr.h -I/root/.pyenv/versions/3.11.7/include/python3.11 -I/work/main/.venv/lib/python3.11/site-packages/torch/include -I/work/main/.venv/lib/python3.11/site-packages/torch/include/torch/csrc/api/include -mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma -mamx-tile -mamx-bf16 -mamx-int8 -mavx512bf16 -o /tmp/torchinductor_root/26/c26iubybfuqa4ugjymazjqwd43qzaiew3utlgkxsr27wreic46ww.main.so -ltorch -ltorch_cpu -ltorch_python -lgomp -lc10 -L/root/.pyenv/versions/3.11.7/lib -L/work/main/.venv/lib/python3.11/site-packages/torch/lib
# 
# Output:
# In file included from /work/main/.venv/lib/python3.11/site-packages/torch/include/c10/macros/Macros.h:1,
#                  from /work/main/.venv/lib/python3.11/site-packages/torch/include/ATen/NumericUtils.h:7,
# grad setting: grad [0, 1]
import torch


def program(a0, a1):
    r1 = a0 * -0.5
    v2 = r1[1]
    v3 = v2.unsqueeze(0)
    v4 = v3.unsqueeze(1)
    v4.clamp_(-0.5, 3.0)
    return (r1,)


def make_args():
    torch.manual_seed(2638)
    a0 = torch.randn((2, 4, 4))
    a1 = torch.randn((2, 4, 4))
    return [a0, a1]
