# found under torch_compile (seed 23, 2026-11-28, after about 3,900 programs, at 23b469c): Inductor (torch 2.9.1, this x86_64 CPU's AVX-512 code) failed to compile a backward region, found_0cd5fce8f9aa's class: a masked load at indirect indices (the gradient of a scatter into a flattened base) under a pad's mask that is one bool across the vectorized loop (CppCompileError, VecMask<int64_t, 2>(bool)), loud; fixed: the scatter's value gradient is the written view of the base's gradient, not a gather (transforms/view_scatter.py)
# torch._inductor.exc.InductorError: CppCompileError: C++ compile error
# 
# Command:
# g++ /tmp/torchinductor_root/bf/cbfjc4srr6p55zo6mkm3eujylqkya3znvybrotwxk4muxtbeetsh.main.cpp -D TORCH_INDUCTOR_CPP_WRAPPER -D STANDALONE_TORCH_HEADER -D C10_USING_CUSTOM_GENERATED_MACROS -D CPU_CAPABILITY_AVX512 -O3 -DNDEBUG -fno-trapping-math -funsafe-math-optimizations -ffinite-math-only -fno-signed-zeros -fno-math-errno -fno-finite-math-only -fno-unsafe-math-optimizations -ffp-contract=off -fexcess-precision=fast -fno-tree-loop-vectorize -march=native -shared -fPIC -Wall -std=c++17 -Wno-unused-variable -Wno-unknown-pragmas -pedantic -fopenmp -include /tmp/torchinductor_root/precompiled_headers/cav2yc677fqt6ob2ezbcytjw5q4omtydd4dqb4jbodbwdm4b4pkr.h -I/root/.pyenv/versions/3.11.7/include/python3.11 -I/work/main/.venv/lib/python3.11/site-packages/torch/include -I/work/main/.venv/lib/python3.11/site-packages/torch/include/torch/csrc/api/include -mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma -mamx-tile -mamx-bf16 -mamx-int8 -mavx512bf16 -o /tmp/torchinductor_root/bf/cbfjc4srr6p55zo6mkm3eujylqkya3znvybrotwxk4muxtbeetsh.main.so -ltorch -ltorch_cpu -ltorch_python -lgomp -lc10 -L/root/.pyenv/versions/3.11.7/lib -L/work/main/.venv/lib/python3.11/site-packages/torch/lib
# 
# Output:
# In file included from /work/main/.venv/lib/python3.11/site-packages/torch/include/c10/macros/Macros.h:1,
#                  from /work/main/.venv/lib/python3.11/site-packages/torch/include/ATen/NumericUtils.h:7,
# grad setting: grad [1]
import torch


def program(a0, a1, a2):
    r1 = a1 * -2.0
    r2 = a1 * -2.0
    v3 = r2.unsqueeze(2)
    v4 = v3.diagonal()
    v4.mul_(-2.0)
    v5 = v4.diagonal()
    a0.relu_()
    r6 = v3 * -2.0
    v7 = r6[1:2]
    v8 = v7.unsqueeze(2)
    v8.masked_fill_(a2, -0.5)
    r9 = r6.clone()
    r2.add_(-0.5)
    v10 = r2[:, 3:]
    return (r1, r2, r6, r9)


def make_args():
    torch.manual_seed(697)
    a0 = torch.randn((4,))
    a1 = torch.randn((2, 4, 4))
    a2 = torch.rand((1, 4, 1, 1, 4)) < 0.5
    return [a0, a1, a2]
