"""Operators that in-place workloads need and thunder 0.2.6 lacks, registered through thunder's own tables.

The one place where the extension adds to thunder's globals; importing ``thunder_ext`` applies it, so
stock ``thunder.jit`` gains it too. Each entry is registered only where thunder has none.

- ``tensor % n``: thunder 0.2.6 defines ``TensorProxy.__mod__`` but registers no ``"mod"`` method, so
  the operator fails with ``TypeError: 'NoneType' object is not callable``. litgpt's sliding-window
  cache writes at ``input_pos % max_cache_len`` (a circular cache); Python's ``%`` on tensors is
  ``torch.remainder``.
- ``Tensor.fill_``: not defined at all.
- ``Tensor.copy_`` from a source that broadcasts to the target: thunder's ``_copy_`` converts the
  dtype but not the shape, and ``prims.copy_`` then refuses ("Shapes were expected to be the same"),
  where PyTorch broadcasts. ``_copy_`` is replaced by one that expands the source first.
"""

import thunder.torch as ltorch
import torch
from thunder.core.jit_ext import (
    _general_jit_lookaside_map,
    ensure_recursive_proxies,
    interpreter_needs_wrap,
    record_source_loc_in_symbol_header,
)
from thunder.core.prims import OpTags
from thunder.core.proxies import TensorProxy
from thunder.torch.langctx import _method_name_to_fn_map, register_method

if "mod" not in _method_name_to_fn_map:
    register_method("mod", ltorch.remainder)


# ``Tensor.fill_`` is missing ("Unknown attribute fill_"): it is ``zero_`` with another value, and
# is written as thunder writes ``zero_``, with thunder's own ``_copy_``, so every pass sees a write.
if torch.fill_ not in ltorch._torch_to_thunder_function_map:

    @ltorch.torchsymbol(torch.fill_, is_method=True, tags=(OpTags.IN_PLACE,), out_of_place=ltorch.full_like)
    def fill_(a, value, /):
        return ltorch._copy_(a, ltorch.full_like(a, value))

    # thunder's interpreter diverts torch functions through a lookaside table filled, once, from the
    # function map when it loads: ``torch.fill_(t, v)`` needs its entry made as thunder makes them.
    _general_jit_lookaside_map[torch.fill_] = ensure_recursive_proxies(
        interpreter_needs_wrap(record_source_loc_in_symbol_header(fill_))
    )


# ``ltorch.copy_`` (and ``zero_``, ``fill_``...) call the module's ``_copy_`` at trace time, so replacing it
# reaches every caller. A source that does not broadcast still fails, in ``expand``, naming both shapes.
_copy_same_shape = ltorch._copy_


def _copy_(a, b, /):
    if isinstance(b, TensorProxy) and b.shape != a.shape:
        b = ltorch.expand(b, a.shape)
    return _copy_same_shape(a, b)


ltorch._copy_ = _copy_
