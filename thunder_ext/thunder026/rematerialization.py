"""Two repairs of thunder 0.2.6's rematerialization, in the extension's compilations.

thunder's ``rematerialize`` lets a fusion region (the consumer) recompute values of an earlier region (the producer)
from the producer's inputs instead of receiving them: ``find_cut`` picks what the producer passes, and
``apply_rematerialization_for_consumer`` recomputes in the consumer every other input it reads of the producer.

1. **A cut leaves no pinned op to recompute** (``_passing_what_only_pinned_ops_make``, around ``find_cut``). The
   extension pins every write and every read of storage a later op writes (``transforms/no_recomputation.py``):
   ``find_cut`` never puts their results on the consumer's side. But a value the producer returns anyway, for a
   region after the consumer, is left out of the cut, and the consumer then recomputes it from the producer's
   inputs, pinned ops included. A second torch.compile fusion pass (``torchcompile_xentropy``, after
   ``torchcompile``) made a region recompute an ``index_copy`` and the ``copy_to_out_`` that writes it, across the
   write (the fuzzer: ``requires_grad/found_0f3aaa06ad4a``; the checker refused it, loudly). Rule: a consumer's
   input that the producer makes and only a pinned op's recomputation would give the consumer joins the cut.
2. **A region that recomputes an op of several outputs receives none of them** (``_taking_what_it_recomputes``,
   around ``apply_rematerialization_for_consumer``). It recomputes whole ops, and keeps as the region's inputs the
   values the cut passes. Where the cut passes one output of an op of several outputs and the region recomputes the
   op for the others, the region defines the passed name twice, as its input and as the op's output, and the fusion
   executor fails to build it (``RuntimeError: Trying to add the name t30 to a trace, but that name is already
   used``). The extension's traces hold such ops: renames of several aliases at once, ``(t30, t31, t32) =
   update_aliases((t28, t29, v1))``, the first output passed for another region, the others recomputed (the
   fuzzer, under the torch.compile executor: ``requires_grad/found_0260ce20cd8d``, ``found_bad6146fb682``). Rule: a
   region's input that one of its recomputed ops defines again is dropped from its inputs; the region uses the
   recomputed value. It is the value it received: rematerialization recomputes only ops free to run twice (rule
   1), from the inputs the earlier region's same op read. The earlier region still returns it where another op
   reads it.

Retired by: thunder cutting at the values a producer returns anyway, and taking an op's recomputed outputs out of
the region's inputs.
"""

from __future__ import annotations

import dataclasses
import functools

from thunder.core import rematerialization
from thunder.core.proxies import ProxyInterface
from thunder.core.symbol import BoundSymbol, has_tags

from thunder_ext.thunder026.scope import compiling_with_extension
from thunder_ext.thunder026.tables import RECOMPUTING_DIFFERS


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


def _passing_what_only_pinned_ops_make(find_cut):
    @functools.wraps(find_cut)
    def cut_at(external_producer_outputs, producer: BoundSymbol, consumer: BoundSymbol) -> tuple:
        cut = find_cut(external_producer_outputs, producer, consumer)
        if not cut or not compiling_with_extension():
            return cut
        names = [c.name if isinstance(c, ProxyInterface) else c for c in cut]  # thunder takes all names or none
        passed = set(names)
        behind_pinned = set()  # what the consumer, given the cut, could recompute only through a pinned op
        for s in producer.subsymbols:  # in program order: one walk, whatever the number of inputs
            if has_tags(s, {RECOMPUTING_DIFFERS}) or any(
                i.name in behind_pinned and i.name not in passed for i in s.flat_proxy_args
            ):
                behind_pinned.update(o.name for o in s.flat_proxy_outs)
        pinned = [a.name for a in consumer.args if a.name in behind_pinned and a.name not in passed]
        return (*names, *pinned) if pinned else cut

    return cut_at


def install() -> None:
    """Wrap thunder's functions once (``rematerialize`` looks them up by its module's name at each call)."""
    rematerialization.find_cut = _passing_what_only_pinned_ops_make(rematerialization.find_cut)
    rematerialization.apply_rematerialization_for_consumer = _taking_what_it_recomputes(
        rematerialization.apply_rematerialization_for_consumer
    )
