"""A bound symbol's imports and objects gathered in one pass over its printables, not two.

thunder 0.2.6's ``BoundSymbol.gather_ctxs`` calls ``import_ctx`` and then ``object_ctx``, and each makes the
printables of the symbol's output, arguments and keyword arguments (``codeutils.to_printable`` on every leaf) for
their side effect alone: filling the symbol's two dicts, the imports and the objects. The second pass finds what
the first found (``TraceCtx.add_object`` names an object once), so it is pure cost. A trace's ``python_callable``
gathers twice (``python`` and ``python_ctx``) and prints once: five passes per symbol, where three do the same.
Measured on a 30-layer litgpt model's prologue (3,039 symbols, one of them the Python guards' check of 3,866 paths),
printing it took 0.85 s (2026-12-05).

Here ``gather_ctxs`` is ``import_ctx`` (which fills both dicts), the call context and the objects ``import_ctx``
gathered: the same three dicts. Installed by ``adapt_thunder`` for every compilation: it changes no program text,
only its cost.

Retired by: thunder gathering a bound symbol's contexts in one pass.
"""

from __future__ import annotations

from thunder.core.symbol import BoundSymbol

_thunders = BoundSymbol.gather_ctxs


def gather_ctxs(self: BoundSymbol) -> tuple[dict, dict, dict]:
    return self.import_ctx(), self._get_call_ctx(), self._object_ctx


def install() -> None:
    BoundSymbol.gather_ctxs = gather_ctxs
