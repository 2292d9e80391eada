"""``thunder_ext.jit``: ``thunder.jit`` with in-place writes functionalized, proved and run in place."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import thunder
import torch
from thunder import jit as thunder_jit  # bound at import, so replacing ``thunder.jit`` by ours cannot recurse
from thunder.core.transforms import Transform
from thunder.extend import Executor

from thunder_ext.compile_cache import CompileCache, attach
from thunder_ext.executors import inplace_ex
from thunder_ext.hooks import HOOKS
from thunder_ext.transforms import InplaceTransform


def jit(
    fn: Callable,
    /,
    *,
    executors: Sequence[Executor | str] | None = None,
    transforms: Sequence[Transform] | None = None,
    strict: bool = False,
    replay_blocks: bool = True,
    block_programs: bool | None = None,
    compile_cache: bool | None = None,
    **kwargs: Any,
) -> Callable:
    """A drop-in for ``thunder.jit``: same arguments, same result, in-place writes run in place.

    The caller's ``executors`` (thunder's defaults if None) and ``transforms`` are kept; the
    extension's executor goes first and its transform last, so it sees the final trace.
    ``strict=True`` raises instead of falling back to a copy for a write it cannot prove.

    ``replay_blocks``: thunder's interpreter traces the first call of each kind of repeated block (an element of a
    ``torch.nn.ModuleList`` of ``fn``: litgpt's ``Block``, an HF decoder layer; or a child of an ``nn.Sequential``
    whose class repeats there and which holds modules: a ViT's block) and replays the others from it,
    each with its own parameters and buffers, instead of interpreting their Python again; a call that a replay
    would not trace exactly is interpreted (``thunder_ext/regional/replay.py``). The compile log says,
    per compilation, how many calls were replayed and why any other was interpreted.

    ``block_programs`` (None, the default: unless thunder's torch.compile executor is among the executors, whose
    regions a program's call would cut at each block): each call of a repeated block, the recorded one and each
    replay, is one op of the model's trace, a call of the block's own program, which the whole pipeline compiled once
    from the record, where the model's trace cannot tell it from the block's ops (``transforms/block_calls.py``);
    the log says ``compiled Block once (0.3 s), called 30 times``, or why a call called none. Under grad, a block
    that writes nothing and returns tensors is compiled with its backward: the forward trace calls its forward, the
    backward trace its backward. With the compile cache each program (under grad, with its backward) is stored apart
    too, keyed by the block's ops: a deeper model of the same blocks logs ``loaded Block``. ``False``: each replay
    appends the block's ops to the model's trace.

    With nvFuser among the executors (thunder's defaults include it where it loads), its fusion
    pass takes CUDA writes into its regions, and the transform proves each or gives it back to
    the PyTorch executor (docs/gpu.md).

    ``compile_cache``: each compilation is saved on disk, and a later process that makes the same one loads it
    instead of tracing (``thunder_ext.compile_cache``). None follows ``THUNDER_EXT_CACHE`` (unset or ``1``: on,
    ``0``: off, ``opt-in``: off but where asked); ``False`` turns it off for this function, ``True`` on unless
    ``THUNDER_EXT_CACHE=0``.

    ``fn`` may be the ``step`` of a ``torch.optim`` SGD, Adam or AdamW: its functional update is jitted
    (``thunder_ext.integrations.optim``, through ``HOOKS.jit_replacements``). What an integration does once
    ``fn`` is jitted is in ``HOOKS.after_jit`` (an HF model's ``generate()`` warns that it runs uncompiled).
    """
    options = dict(executors=executors, transforms=transforms, strict=strict, replay_blocks=replay_blocks,
                   block_programs=block_programs, compile_cache=compile_cache, **kwargs)  # fmt: skip
    for replacement in HOOKS.jit_replacements:
        if (compiled := replacement(fn, jit, options)) is not None:
            return compiled
    extension = with_extension(executors, transforms, strict, replay_blocks, compile_cache, block_programs)
    jitted = thunder_jit(fn, **extension, **kwargs)
    if compile_cache is not False and not isinstance(fn, torch.nn.Module):  # a module's: by its CompileCache
        attach(jitted, compile_cache)
    for after in HOOKS.after_jit:
        after(fn, jitted)
    return jitted


def with_extension(
    executors: Sequence[Executor | str] | None,
    transforms: Sequence[Transform] | None,
    strict: bool,
    replay_blocks: bool = True,
    compile_cache: bool | None = False,
    block_programs: bool | None = None,
) -> dict[str, list]:
    """``thunder.jit``'s ``executors`` and ``transforms`` with the extension's: its executor first, before any
    fuser (a region is compiled with the operators its executor list claimed), its transform last (then, unless
    ``compile_cache`` is False, the compile cache's, which attaches the cache to a module once thunder has made
    it)."""
    executors = thunder.get_default_executors() if executors is None else executors
    cache = [] if compile_cache is False else [CompileCache(compile_cache)]
    extension = [InplaceTransform(strict=strict, replay_blocks=replay_blocks, block_programs=block_programs), *cache]
    return {"executors": [inplace_ex, *executors], "transforms": [*(transforms or ()), *extension]}
