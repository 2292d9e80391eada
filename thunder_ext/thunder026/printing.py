"""A string inside a collection, printed in a program text as Python reads it back.

thunder 0.2.6's ``codeutils.prettyprint`` prints a collection by printing each leaf quoted (``repr``) between two
markers, printing the collection with ``str`` (which quotes each leaf again) and deleting each marker with the quote
beside it. A string holding a double quote is printed by ``repr`` in single quotes, which the second quoting escapes,
so the program text holds ``{1: \\'say "hi"\\'}`` and does not compile (``SyntaxError``). The extension's checks take
such strings: a write's source line in the prologue's refusal of arguments sharing written state
(``getattr(self, "k").add_(x)``), a string value the Python guards compare. In the extension's compilations a
collection's leaves are printed by an object whose ``repr`` is their printed text, so ``str`` of the collection
holds each as printed.

Written for thunder 0.2.6's ``codeutils.prettyprint``. Retired by: a thunder that prints collections of strings
without quoting them twice.
"""

from __future__ import annotations

from typing import Any

from thunder.core import baseutils, codeutils
from thunder.core.pytree import tree_flatten, tree_unflatten

from thunder_ext.thunder026.scope import compiling_with_extension


class _Printed:
    """A leaf as printed: ``repr`` gives the text itself."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _printing_strings_once(prettyprint):
    def print_(x: Any, *, literals_as_underscores: bool = False, **kwargs) -> str:
        if not baseutils.is_collection(x) or not kwargs.get("literals_allowed", True) or not compiling_with_extension():
            return prettyprint(x, literals_as_underscores=literals_as_underscores, **kwargs)
        flat, spec = tree_flatten(x, namespace="")  # as thunder's: a dataclass stays one leaf
        # each leaf as thunder prints it in a collection (without its type), but with no markers to delete
        leaves = [_Printed(prettyprint(leaf, literals_as_underscores=literals_as_underscores)) for leaf in flat]
        return str(tree_unflatten(leaves, spec))

    return print_


def install() -> None:
    """Wrap ``codeutils.prettyprint``, which every printer of thunder's reaches through its module (``adapt_thunder``
    calls it once)."""
    codeutils.prettyprint = _printing_strings_once(codeutils.prettyprint)
