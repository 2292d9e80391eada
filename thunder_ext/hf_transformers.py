"""HF transformers under the extension: ``thunder_ext.GrowingStaticCache``, HF's ``StaticCache`` with buffers that
grow in buckets with the positions they hold; ``generate()``'s default cache replaced by it; and
``thunder_ext.HFTransformersRecipe``, thunder's recipe on any device, with that default.

HF's default cache, ``DynamicCache``, grows by ``torch.cat`` (a new cache each step, a shape for each length)
and is not compileable, so the model builds its attention mask inside the compiled forward, with ``torch.vmap``,
which thunder 0.2.6's splitter refuses. A ``StaticCache`` is written in place (``index_copy_``) and ``generate``
builds its mask before the forward, but it holds ``max_cache_len`` positions from the first token. This cache is
a ``StaticCache`` whose buffers hold a bucket of them.

The rules, each with its test in ``tests/test_hf_transformers.py``:

1. **Capacity.** Each layer holds ``min_capacity * 2**k`` positions, capped at ``max_cache_len``
   (``thunder_ext.buckets``): the smallest bucket that holds every position written since the sequences started.
2. **Growth happens where the positions are sized.** ``generate`` asks the cache for the mask's size
   (``get_mask_sizes``) with the positions of the coming forward, before the forward runs, outside compiled
   code: there each layer's keys and values are copied once into the bucket that holds those positions (zeros
   past them, as a ``StaticCache`` starts). A compiled forward then sees a buffer of a new shape and compiles
   once per bucket; its writes are ``StaticLayer.update``'s ``index_copy_``, in place under the extension.
3. **New sequences.** Positions that start at 0 start the sequences anew: the buffers take the bucket of the
   coming positions, nothing copied; ``reset()`` (``generate`` reusing a cache) returns to the smallest bucket.
4. **Bad positions** (outside ``[0, max_cache_len)``) raise a ``ValueError`` that names them, before anything
   is resized or written.

Only growth needs the positions' values, so it needs them on the host: a model called directly, or traced by
``thunder.jit`` with its mask built inside, calls ``reserve(cache_position)`` first.
"""

from __future__ import annotations

import functools
import logging
import warnings
from typing import Any

import thunder
import torch
from thunder.core.trace import is_tracing
from thunder.recipes import HFTransformers
from transformers import GenerationConfig, GenerationMixin, StaticCache
from thunder.core.recipe import Lookaside
from transformers.cache_utils import Cache, DynamicLayer, StaticLayer

from thunder_ext.buckets import MIN_CAPACITY, capacity_for, checked_min_capacity

log = logging.getLogger(__name__)


class GrowingLayer(StaticLayer):
    """A ``StaticLayer`` whose buffers hold ``capacity`` of its ``max_cache_len`` positions."""

    min_capacity = MIN_CAPACITY  # ``GrowingStaticCache`` sets its own

    def __init__(self, max_cache_len: int, *args: Any, **kwargs: Any) -> None:
        # ``StaticLayer``'s arguments (it ignores ``sliding_window``, as ``StaticCache`` does); buffers of a bucket
        super().__init__(min(self.min_capacity, max_cache_len), *args, **kwargs)
        self.max_cache_len = max_cache_len  # the limit, as HF reads it; the buffers hold ``capacity``

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    def get_max_cache_shape(self) -> int:
        return self.capacity  # the buffers' length, which ``generate`` gives the attention mask

    def get_mask_sizes(self, cache_position: torch.Tensor) -> tuple[int, int]:
        return self.capacity, 0

    def resize(self, capacity: int, *, copy: bool) -> None:
        """Buffers of ``capacity`` positions, zeros past the first ``capacity`` ones copied if ``copy``."""
        if capacity == self.capacity:
            return
        old = (self.keys, self.values)
        self.keys, self.values = (t.new_zeros(*t.shape[:2], capacity, t.shape[3]) for t in old)
        if copy:
            kept = min(capacity, old[0].shape[2])
            for o, n in zip(old, (self.keys, self.values)):
                n[:, :, :kept].copy_(o[:, :, :kept])
        # as ``StaticLayer`` marks its buffers: a fixed address for compiled code (CUDA graphs)
        torch._dynamo.mark_static_address(self.keys)
        torch._dynamo.mark_static_address(self.values)

    def reset(self) -> None:
        self.resize(min(self.min_capacity, self.max_cache_len), copy=False)
        super().reset()


class GrowingStaticCache(StaticCache):
    """HF's ``StaticCache`` grown in buckets (the module's rules): the same arguments, plus ``min_capacity``,
    the smallest bucket. ``max_cache_len`` is the limit; ``generate`` passes it as ``past_key_values``::

        cache = thunder_ext.GrowingStaticCache(config=model.config, max_batch_size=1, max_cache_len=4096)
        model.generate(ids, attention_mask=mask, past_key_values=cache, max_new_tokens=512)
    """

    def __init__(self, *args: Any, min_capacity: int = MIN_CAPACITY, **kwargs: Any) -> None:
        self.min_capacity = checked_min_capacity("thunder_ext.GrowingStaticCache", min_capacity)
        Cache.__init__(self, GrowingLayer, *args, **kwargs)
        for layer in self.layers:
            layer.min_capacity = min_capacity
            layer.reset()

    def get_mask_sizes(self, cache_position: torch.Tensor, layer_idx: int) -> tuple[int, int]:
        if not is_tracing():  # thunder's interpreter cannot read the positions' values; ``reserve`` says so
            self.reserve(cache_position)
        return super().get_mask_sizes(cache_position, layer_idx)

    def reserve(self, cache_position: torch.Tensor) -> None:
        """Make room for a forward that writes ``cache_position``: grow to the bucket that holds its last
        position (rule 2), or start anew at that bucket if it starts at position 0 (rule 3)."""
        if cache_position.numel() == 0:
            return
        low, high = (int(p) for p in torch.aminmax(cache_position))
        limit = self.max_cache_len
        if low < 0 or high >= limit:
            raise ValueError(
                f"thunder_ext.GrowingStaticCache: `cache_position` runs from {low} to {high}, but the cache holds "
                f"positions [0, {limit}) (its max_cache_len)"
            )
        starts = int(cache_position.reshape(-1)[0]) == 0
        for layer in self.layers:
            if starts or high >= layer.capacity:
                layer.resize(capacity_for(high + 1, layer.min_capacity, limit), copy=not starts)


CACHE_IMPLEMENTATION = "growing"


def register_cache_implementation() -> None:
    """``generate(..., cache_implementation="growing")`` makes a ``GrowingStaticCache`` of ``max_length``
    positions, as ``"static"`` makes a ``StaticCache``. transformers 4.55 keeps its cache implementations in two
    module-level registries with no function to add one; this is the one place the extension writes them."""
    from transformers.generation import configuration_utils

    configuration_utils.NEED_SETUP_CACHE_CLASSES_MAPPING[CACHE_IMPLEMENTATION] = GrowingStaticCache
    if CACHE_IMPLEMENTATION not in configuration_utils.ALL_CACHE_IMPLEMENTATIONS:
        configuration_utils.ALL_CACHE_IMPLEMENTATIONS.append(CACHE_IMPLEMENTATION)


def use_growing_cache_by_default(model: object) -> None:
    """``model.generate()`` makes a ``GrowingStaticCache`` where it would have made HF's default ``DynamicCache``,
    which no entry point of thunder 0.2.6 can compile (the module's docstring): when the call passes no cache,
    names no cache implementation, and the model's configuration names none either. Anything that is not an HF
    model able to use a static cache is left as it is.

    transformers 4.55 decides the default in ``GenerationMixin._prepare_cache_for_generation``, with no setting
    that a cache passed to ``generate`` would not then contradict ("passing both ``cache_implementation`` and
    ``past_key_values``"), so the model's own method is wrapped, on this instance only.
    """
    if not isinstance(model, GenerationMixin) or "_prepare_cache_for_generation" in vars(model):
        return
    if not (model._supports_default_dynamic_cache() and model._can_compile_fullgraph):
        return
    prepare = model._prepare_cache_for_generation

    def prepare_growing_by_default(generation_config: GenerationConfig, model_kwargs: dict, *args: Any) -> Any:
        default = getattr(model.config.get_text_config(decoder=True), "cache_implementation", None)
        takes_default = generation_config.cache_implementation is None and default is None
        if takes_default and generation_config.use_cache and model_kwargs.get("past_key_values") is None:
            generation_config.cache_implementation = CACHE_IMPLEMENTATION  # this call's copy of the config
        return prepare(generation_config, model_kwargs, *args)

    model._prepare_cache_for_generation = prepare_growing_by_default
    log.info(
        "thunder_ext: %s.generate() without a cache of its own now uses thunder_ext.GrowingStaticCache, written in "
        "place, where HF would use DynamicCache, which thunder cannot compile", type(model).__name__,
    )  # fmt: skip


def refuse_dynamic_cache(*args: Any, **kwargs: Any) -> None:
    raise NotImplementedError(
        "thunder_ext: HF's DynamicCache (generate()'s default cache) grows by torch.cat, a new shape each step that "
        "thunder compiles anew: pass generate(..., cache_implementation='growing') (thunder_ext.GrowingStaticCache, "
        "written in place) or past_key_values=thunder_ext.GrowingStaticCache(...), or compile with "
        "recipe=thunder_ext.HFTransformersRecipe(), which uses it by default"
    )


def dynamic_cache_lookaside() -> Lookaside:
    """Under thunder's interpreter, a write into a ``DynamicCache`` raises ``refuse_dynamic_cache``'s error while
    tracing, before anything runs, instead of failing later in thunder."""
    return Lookaside(fn=DynamicLayer.update, replace_with=refuse_dynamic_cache)


def warn_that_generate_runs_uncompiled(model: object, jitted: torch.nn.Module) -> None:
    """``thunder_ext.jit(model).generate(...)``, for an HF model, warns once that it runs ``model`` uncompiled:
    HF's ``generate`` calls the model it is bound to, and thunder's interpreter cannot trace an HF forward
    without the lookasides and transforms of thunder's recipe (its mask is made with ``torch.vmap``)."""
    if not isinstance(model, GenerationMixin):
        return
    generate = model.generate
    warned = False

    @functools.wraps(generate)
    def generate_uncompiled(*args: Any, **kwargs: Any) -> Any:
        nonlocal warned
        if not warned:
            warned = True
            warnings.warn(
                f"thunder_ext.jit({type(model).__name__}).generate() runs the model uncompiled: HF's generate calls "
                "the model itself. Compile an HF model with model.forward = thunder_ext.thunderfx(model.forward), or "
                "thunder.compile(model, recipe=thunder_ext.HFTransformersRecipe(), plugins='inplace')",
                stacklevel=2,
            )
        return generate(*args, **kwargs)

    jitted.generate = generate_uncompiled


class HFTransformersRecipe(HFTransformers):
    """thunder's ``"hf-transformers"`` recipe, on any device, with ``generate()``'s default cache a
    ``GrowingStaticCache``: ``thunder.compile(model, recipe=thunder_ext.HFTransformersRecipe(), plugins="inplace")``.

    thunder 0.2.6's recipe takes no ``fuser`` and always lists nvFuser, which becomes ``None`` among its executors
    where nvFuser does not load (a CPU), and ``thunder.jit`` refuses that; this one takes torch.compile's there.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if thunder.extend.get_executor("nvfuser") is None:
            self.executor_names[self.executor_names.index("nvfuser")] = "torchcompile"

    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        use_growing_cache_by_default(model)
        return super().apply(model)


register_cache_implementation()
