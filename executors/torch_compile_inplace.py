"""thunder's torch.compile executor runs ``copy_to_out_`` inside its regions.

Registered as supported by ``torch_compile_ex`` (``FusionExecutor.register_supported``, thunder's public way),
its fusion pass takes each write into the region of the ops around it, where Inductor functionalizes the write
and re-inplaces it. Only ``torch_compile_ex``, which fuses every op, takes ``copy_to_out_``: thunder's
``torchcompile_cat`` and ``torchcompile_xentropy`` fuse a few named ops around nvFuser and are left as they are.
Which writes a region may keep is the checker's to decide (``transforms/regions/torch_compile.py``).
"""

from thunder.executors.torch_compile import torch_compile_ex

from thunder_ext.primitive import copy_to_out_

torch_compile_ex.register_supported(copy_to_out_)
