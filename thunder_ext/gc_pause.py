"""The garbage collector paused: for first calls, which compile, and for compiling a large program text."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused(*, collect: bool = True) -> Iterator[None]:
    """No automatic garbage collection within the block (after one, unless ``collect`` is False): for first calls,
    which compile, and where a program text compiles (its parser's objects set off full collections).

    Once torch.compile has run in a process, Dynamo's patched ``nn.Module.__init__`` records every new
    module in a dict keyed by id whose entries weakref callbacks delete when the module dies
    (``GenerationTracker.generation_values``). thunder's interpreter walks that dict when the traced
    code builds a module (litgpt's ``GPT.forward`` builds an ``nn.Identity`` per call); a collection
    during the walk that frees modules of earlier configurations, held in reference cycles, changes it
    under the walk: "InterpreterError: ... dictionary changed size during iteration".
    """
    enabled = gc.isenabled()
    if collect:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
