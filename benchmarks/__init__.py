"""The benchmark suite: each case side by side under eager PyTorch, stock ``thunder.jit``, ``thunder_ext.jit``
and ``torch.compile``, in one process; tables and plots into ``docs/benchmarks/``.

Run: ``thunder-ext bench`` or ``python -m thunder_ext.benchmarks`` (``--help`` for the options).
"""
