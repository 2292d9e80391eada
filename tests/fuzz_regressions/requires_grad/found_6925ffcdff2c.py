# found under torch_compile: a fill_ through diagonal(unsqueeze(diagonal(r4))) of a one-element intermediate was lost (r4 returned unchanged, silently; stock thunder.jit with the executor is right; fuzz, 2026-11-27): torch 2.9.1's torch.compile returns a view through two diagonals of a tensor its graph makes as a tensor of its own (plain torch.compile alike), and the write ran after the region; fixed: such a storage is scattered into its base (transforms/view_writes.py, `_returned_apart_by_inductor`)
# AssertionError: Tensor-likes are not close!
# 
# Mismatched elements: 1 / 1 (100.0%)
# Greatest absolute difference: 1.0819921493530273 at index (0, 0) (up to 1e-05 allowed)
# Greatest relative difference: 0.5409960746765137 at index (0, 0) (up to 1.3e-06 allowed)
# 
# The failure occurred for item [1]
# grad setting: grad []
import torch


def program(a0):
    v1 = a0.unsqueeze(0)
    v2 = a0.unsqueeze(0)
    r3 = a0.sum()
    r4 = v1 * -2.0
    v5 = r4.diagonal()
    v6 = v5.unsqueeze(0)
    v7 = v6.diagonal()
    v7.fill_(-2.0)
    r8 = a0.sum()
    v9 = a0.unsqueeze(0)
    return (r3, r4, r8)


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((1,))
    return [a0]
