# found: nvFuser could not alias the broadcast written into a0 (INTERNAL ASSERT FAILED ... self replay, H100,
# 2026-11-26); nvFuser's rule 5 now gives the write back to the PyTorch executor (not yet rerun on a GPU)
# RuntimeError:  INTERNAL ASSERT FAILED at /workspace/Fuser/csrc/transform_replay.cpp:302, please report a bug with repro script to NVFuser at https://github.com/NVIDIA/Fuser/issues. 
# Expected iter_types_match(id->getIterType(), new_id->getIterType()) . Axes iS0{2} and bS3{1 ex 2} do not match for self replay.
# Exception raised from selfReplay at /workspace/Fuser/csrc/transform_replay.cpp:302 (most recent call first):
# grad setting: grad []
import torch


def program(a0, a1):
    v1 = a0.unsqueeze(0)
    v2 = a0.unsqueeze(0)
    a0.copy_(a1)
    return ()


def make_args():
    torch.manual_seed(0)
    a0 = torch.randn((2,))
    a1 = torch.randn(())
    return [a0, a1]
