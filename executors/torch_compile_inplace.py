"""thunder's torch.compile executor runs ``copy_to_out_`` inside its regions.

Registered as supported by ``torch_compile_ex`` (``FusionExecutor.register_supported``, thunder's public
way), its fusion pass takes each write into the region of the ops around it. A region is compiled from
the PyTorch form of its ops, where the write is ``inplace_ex``'s ``out.copy_(computed)``: Inductor
functionalizes that mutation of ``out`` and, for a cache write (``index_copy``, ``index_put``, setitem,
an elementwise update), re-inplaces it, so nothing cache-sized is allocated (tests/test_torch_compile_regions.py
measures it). Which writes may stay in a region is decided afterwards, on the final trace, by
``thunder_ext.transforms.fusion_regions`` (``TORCH_COMPILE``); the others are given back to the PyTorch
executor.

Only ``torch_compile_ex``, which fuses every op: thunder's ``torchcompile_cat`` and
``torchcompile_xentropy`` fuse a few named ops around nvFuser and are left as they are.
"""

from thunder.executors.torch_compile import torch_compile_ex

from thunder_ext.primitive import copy_to_out_

torch_compile_ex.register_supported(copy_to_out_)
