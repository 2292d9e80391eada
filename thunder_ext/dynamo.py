"""``thunder_ext.ThunderCompiler`` and ``thunder_ext.thunderfx``: thunder.dynamo's, with the extension added.

``torch.compile(fn, backend=thunder_ext.ThunderCompiler())`` gives every thunder subgraph the extension's
executor (first) and transform (last), as ``thunder_ext.jit`` does for one function; what thunder's
splitter sends to Inductor is Inductor's. Arguments are those of ``thunder.dynamo.ThunderCompiler``
(``thunder.jit``'s options) plus ``strict``.

Guards: ThunderFX drops thunder's prologue checks of tensor metadata in favour of Dynamo's guards
(``ExtractionOnlyPrologueTransform``), but keeps the rest of each subgraph's prologue. The extension's
checks stay there: the aliased-arguments check (``transforms.aliased_arguments``; thunder's check of the
call's alias groups, which it reads, is a string check and is kept too) and the leaf check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import thunder
import thunder.dynamo
import torch
import torch._functorch.predispatch
from thunder.core.transforms import Transform
from thunder.dynamo.compiler import ThunderFXCompiledObject
from thunder.dynamo.utils import get_torch_compile_kwargs
from thunder.extend import Executor

from thunder_ext.hooks import HOOKS
from thunder_ext.jit import with_extension
from thunder_ext.thunder026.compiled import thunderfx_backend

# how a Dynamo graph enters torch.vmap, before and after pre-dispatch tracing
_ENTERS_VMAP = (torch._C._functorch._vmap_increment_nesting, torch._functorch.predispatch._vmap_increment_nesting)


class ThunderCompiler(thunder.dynamo.ThunderCompiler):
    """A ``torch.compile`` backend: thunder.dynamo's ``ThunderCompiler`` with in-place writes run in place."""

    def __init__(
        self,
        *,
        executors: Sequence[Executor | str] | None = None,
        transforms: Sequence[Transform] | None = None,
        strict: bool = False,
        **thunder_options: Any,
    ) -> None:
        super().__init__(**with_extension(executors, transforms, strict), **thunder_options)

    def __call__(self, gm: torch.fx.GraphModule, sample_args: list) -> Callable:
        if any(node.target in _ENTERS_VMAP for node in gm.graph.nodes):
            # thunder 0.2.6's splitter fails on the batched values of a vmap (tree_flatten of a Tensor), outside
            # the check that would send the node to Inductor; HF's mask is the one such graph users meet
            raise NotImplementedError(
                "thunder_ext.ThunderCompiler: this graph calls torch.vmap, which thunder 0.2.6's splitter cannot "
                "take. HF transformers builds its attention mask so inside the forward of a call with a DynamicCache: "
                "assisted generation and contrastive search, which roll their cache back, and a generate() given a "
                "DynamicCache; greedy search, sampling and beam search use thunder_ext.GrowingStaticCache by default "
                "under model.forward = thunder_ext.thunderfx(model.forward), or pass "
                "generate(..., past_key_values=thunder_ext.GrowingStaticCache(config=model.config))"
            )
        return super().__call__(gm, sample_args)


def thunderfx(fn: Callable, /, **kwargs: Any) -> ThunderFXCompiledObject:
    """``thunder.dynamo.thunderfx`` with the extension: ``torch.compile``'s options go to it, the others
    (``executors``, ``transforms``, ``strict``, ``thunder.jit``'s) to ``thunder_ext.ThunderCompiler``.

    The result has ``fn``'s signature (``inspect.signature``), which HF's ``generate`` reads to decide whether
    to pass an attention mask. Given an HF model's ``forward``, it patches the model so that its ``generate``
    defaults to ``thunder_ext.GrowingStaticCache`` (``HOOKS.after_thunderfx``:
    ``thunder_ext.integrations.hf_transformers.use_growing_cache_by_default``).
    """
    compile_kwargs = get_torch_compile_kwargs(**kwargs)
    backend = ThunderCompiler(**{k: v for k, v in kwargs.items() if k not in compile_kwargs})
    compiled = ThunderFXCompiledObject(backend, torch.compile(fn, backend=backend, **compile_kwargs))
    compiled.__wrapped__ = fn
    for after in HOOKS.after_thunderfx:
        after(fn)
    return compiled


def thunder_subgraphs_of_last_call(compiled: object) -> list[Callable]:
    """The thunder-compiled subgraphs that the last call of ``compiled`` ran, in the order they ran: ``compiled``
    is a ``thunderfx`` result, a ``ThunderCompiler``, or what ``torch.compile(..., backend=<a ThunderCompiler>)``
    returns (``thunder.compile`` with ``thunder.fx``).

    Dynamo compiles a graph per frame (the function, and each function it resumes at after a graph break) and
    per recompilation of a frame; a call runs one graph of each frame it enters. So the last call ran, of each
    frame, the graph that ran last, and of these the ones that ran since the first frame's graph did. When a
    graph ran is when its thunder subgraphs last started (thunder's ``compile_stats``).
    """
    backend = thunderfx_backend(compiled) or compiled
    if not isinstance(backend, thunder.dynamo.ThunderCompiler):
        backend = _torch_compile_backend(compiled)
    last_of_frame: dict[int, tuple[int, list[Callable]]] = {}
    for info in backend.subgraph_infos:
        if not info.thunder_compiled_fns:
            continue
        started = max(thunder.compile_stats(fn).last_trace_host_start for fn in info.thunder_compiled_fns)
        # a graph Dynamo did not make (a backend called by hand) counts as a frame of its own, the first
        frame = getattr(info.original_graph_module.meta.get("dynamo_compile_id"), "frame_id", -1)
        if started > last_of_frame.get(frame, (-1,))[0]:  # -1: never ran
            last_of_frame[frame] = started, info.thunder_compiled_fns
    if not last_of_frame:
        return []
    call_started = last_of_frame[min(last_of_frame)][0]
    ran = sorted((g for g in last_of_frame.values() if g[0] >= call_started), key=lambda g: g[0])
    return [fn for _, fns in ran for fn in fns]


def _torch_compile_backend(compiled: object) -> thunder.dynamo.ThunderCompiler:
    # torch.compile keeps no public handle on its backend. The one place the extension reads Dynamo's
    # internals (torch 2.9): a compiled module holds its context as ``dynamo_ctx``, a compiled function in
    # its closure; the context's callback wraps the backend in layers that each keep the one below as
    # ``_torchdynamo_orig_backend``, down to torch's ``_TorchCompileWrapper`` around the user's backend.
    cells = (c.cell_contents for c in getattr(compiled, "__closure__", None) or ())
    context = getattr(compiled, "dynamo_ctx", None) or next((c for c in cells if hasattr(c, "callback")), None)
    layer = getattr(context, "callback", None)
    while layer is not None and not isinstance(layer, torch._TorchCompileWrapper):
        layer = getattr(layer, "_torchdynamo_orig_backend", None)
    backend = getattr(layer, "compiler_fn", None)
    if not isinstance(backend, thunder.dynamo.ThunderCompiler):
        raise TypeError(
            f"{compiled!r} is neither compiled by thunder (thunder.jit, thunder.compile) nor by torch.compile "
            "with a thunder backend (thunder_ext.ThunderCompiler, thunder_ext.thunderfx)"
        )
    return backend
