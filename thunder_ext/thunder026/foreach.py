"""The ``torch._foreach_*`` ops that optimizers run with ``foreach=True``, which thunder 0.2.6 lacks.

``adapt_thunder`` diverts each (``FOREACH``) to its op on every tensor of the list, so that every write is a
write of its own that the passes see (a symbol of all of them would look like one write), by the jit and by
thunder.dynamo's splitter alike. Retired by: thunder tracing the ``_foreach_*`` ops itself.
"""

from __future__ import annotations

from collections.abc import Callable

import thunder.torch as ltorch
from thunder.core.proxies import TensorProxy


# ``torch._foreach_<op>(tensors, *operands)``, each traced as its op on every tensor of the list. An operand that
# is a list goes element by element; so does the ``scalars`` tensor of ``addcmul``/``addcdiv`` (one value per
# tensor, as optimizers stack their step sizes); any other tensor or number goes to every tensor.
def _foreach(op, scalars_position: int | None = None):
    def each(*args, **kwargs):
        n = len(next(a for a in args if isinstance(a, (list, tuple))))

        def at(a, position: int, i: int):
            if isinstance(a, (list, tuple)) or (position == scalars_position and isinstance(a, TensorProxy)):
                return a[i]
            return a

        results = [op(*(at(a, k, i) for k, a in enumerate(args)), **kwargs) for i in range(n)]
        return None if op.__name__.endswith("_") else results

    return each


# The writes of ``addcmul_``, ``addcdiv_`` and ``maximum_`` go through thunder's ``copy_`` symbol, not the bare
# ``prims.copy_`` that ``ltorch._copy_`` leaves: stock thunder's alias updates see a write only in a symbol
# tagged in-place or ending in ``copy_``, and an unseen write into an argument is read by nothing after it.
# thunder.dynamo's "dataflow" fusion orders by reads, so it put the return before Adam's last write (stock
# backend: ``AssertionError`` in ``split_into_forward_and_backward``).
def _addc(op, inplace: bool):
    """``t + value * op(t1, t2)``, where ``value`` may be a tensor (one of the stacked scalars)."""

    def addc(t, t1, t2, value=1):
        result = ltorch.add(t, ltorch.mul(op(t1, t2), value))
        return ltorch.copy_(t, result) if inplace else result

    addc.__name__ = f"addc{op.__name__}" + ("_" if inplace else "")
    return addc


def _maximum_(a, b):
    return ltorch.copy_(a, ltorch.maximum(a, b))


# torch function -> (its op on one tensor, the position of a ``scalars`` tensor that goes element by element)
_OPS = {
    **{f"_foreach_{name}": (getattr(ltorch, name), None) for name in (
        "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "lerp", "lerp_", "sqrt", "sqrt_",
        "neg", "neg_", "reciprocal", "reciprocal_", "pow", "maximum")},
    "_foreach_maximum_": (_maximum_, None),
    **{f"_foreach_addc{op.__name__}{suffix}": (_addc(op, inplace=bool(suffix)), 3)
       for op in (ltorch.mul, ltorch.div) for suffix in ("", "_")},
}  # fmt: skip

# the name of each ``torch._foreach_*`` function -> what a call of it is traced as
FOREACH: dict[str, Callable] = {name: _foreach(op, scalars_position) for name, (op, scalars_position) in _OPS.items()}
