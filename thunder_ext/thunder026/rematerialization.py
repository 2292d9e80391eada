"""A region that thunder's rematerialization makes recompute an op of several outputs receives none of them.

thunder 0.2.6's ``apply_rematerialization_for_consumer`` lets a fusion region recompute values of an earlier region
from that region's inputs. It recomputes whole ops, and keeps as the region's inputs the values the cut passes.
Where the cut passes one output of an op of several outputs and the region recomputes the op for the others, the
region defines the passed name twice, as its input and as the op's output, and the fusion executor fails to build
it (``RuntimeError: Trying to add the name t30 to a trace, but that name is already used``). The extension's traces
hold such ops: renames of several aliases at once, ``(t30, t31, t32) = update_aliases((t28, t29, v1))``, the first
output passed for another region, the others recomputed (the fuzzer, under the torch.compile executor:
``requires_grad/found_0260ce20cd8d``, ``found_bad6146fb682``).

Rule (``_taking_what_it_recomputes``, around thunder's function, in the extension's compilations): a region's input
that one of its recomputed ops defines again is dropped from its inputs; the region uses the recomputed value. It is
the value it received: rematerialization recomputes only ops free to run twice (``transforms/no_recomputation.py``
pins every write and every read of storage a later op writes), from the inputs the earlier region's same op read.
The earlier region still returns it where another op reads it.

Retired by: thunder taking an op's recomputed outputs out of the region's inputs.
"""

from __future__ import annotations

import dataclasses
import functools

from thunder.core import rematerialization
from thunder.core.symbol import BoundSymbol

from thunder_ext.thunder026.scope import compiling_with_extension


def _taking_what_it_recomputes(apply_for_consumer):
    @functools.wraps(apply_for_consumer)
    def apply(producer: BoundSymbol, consumer: BoundSymbol, cut) -> BoundSymbol:
        updated = apply_for_consumer(producer, consumer, cut)
        if updated is consumer or not compiling_with_extension():
            return updated
        defined = {o.name for s in updated.subsymbols for o in s.flat_proxy_outs}
        if not any(a.name in defined for a in updated.args):
            return updated
        return dataclasses.replace(updated, args=tuple(a for a in updated.args if a.name not in defined))

    return apply


def install() -> None:
    """Wrap thunder's function once (``rematerialize`` looks it up by its module's name at each call)."""
    rematerialization.apply_rematerialization_for_consumer = _taking_what_it_recomputes(
        rematerialization.apply_rematerialization_for_consumer
    )
