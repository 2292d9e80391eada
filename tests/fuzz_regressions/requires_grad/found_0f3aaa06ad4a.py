# found under torch_compile (seed 25, 2026-11-28, after about 3,700 programs, at a70f5a2): a second torch.compile fusion pass (torchcompile_xentropy's) rematerialized the first's regions and made one recompute an index_copy and the copy_to_out_ that writes it, across the write (InplaceOrderingError, loud): the producer returned the value for a later region, so thunder's find_cut left it out of the cut and the consumer recomputed it from the producer's inputs, pinned ops included; fixed: such a value joins the cut (thunder_ext/thunder026/rematerialization.py, rule 1)
# thunder_ext.transforms.prove_inplace.InplaceOrderingError: a fusion region recomputes a value across a write: `TorchCompile2` recomputes t160 of `TorchCompile1`, and touches t155 overwritten; `TorchCompile2` recomputes t353 of `TorchCompile1`, and writes again
# grad setting: grad [0, 1]
import torch


def program(a0, a1, a2):
    r1 = a0 * -2.0
    v2 = r1.select(1, 3)
    v3 = v2.unsqueeze(0)
    v4 = v3.select(1, 0)
    v4.mul_(a1)
    r5 = a1.sum(0)
    r6 = v4.sum()
    r7 = a1 * -2.0
    v8 = r7.view(-1)
    v8.relu_()
    v2.zero_()
    r9 = v8 * 1.5
    v10 = r9.view(-1)
    v11 = v10.view(-1)
    v11.copy_(v11 * 3.0)
    r12 = v4.sum(0)
    v3[0] = a2
    return (r1, r5, r6, r7, r9, r12)


def make_args():
    torch.manual_seed(38088)
    a0 = torch.randn((1, 4))
    a1 = torch.randn((1,))
    a2 = torch.randn((1,))
    return [a0, a1, a2]
