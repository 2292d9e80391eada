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
   (``thunder_ext.integrations.buckets``): the smallest bucket that holds every position written since the sequences started.
2. **Growth happens where the positions are sized.** ``generate`` asks the cache for the mask's size
   (``get_mask_sizes``) with the positions of the coming forward, before the forward runs, outside compiled
   code: there each layer's keys and values are copied once into the bucket that holds those positions (zeros
   past them, as a ``StaticCache`` starts). A compiled forward then sees a buffer of a new shape and compiles
   once per bucket; its writes are ``StaticLayer.update``'s ``index_copy_``, in place under the extension.
3. **New sequences.** Positions that start at 0 start the sequences anew: the buffers take the bucket of the
   coming positions, nothing copied; ``reset()`` (``generate`` reusing a cache) returns to the smallest bucket.
4. **Bad positions** (outside ``[0, max_cache_len)``) raise a ``ValueError`` that names them, before anything
   is resized or written.
5. **Its mask is HF's.** Where the extension sees the model, ``generate`` builds the growing cache's attention
   mask by broadcasting (``masks_for_generate``), equal to the one HF builds with ``torch.vmap``.
6. **Sliding windows.** A sliding-window layer grows up to its window, then writes circularly, as litgpt's cache
   does: position ``p`` in slot ``p % window``. A call of one token writes its slot and attends the window as it
   stands; a call of several attends the window as it stood, then its own tokens (a token can need one that a later
   token of the call overwrites), and writes the last of them. Its mask follows each slot's position, so only
   ``masks_for_generate`` builds it (for ``sdpa`` and ``eager`` attention); HF's own mask functions, which read the
   slots as consecutive positions, get an error that says so.

Only growth needs the positions' values, so it needs them on the host: a model called directly, or traced by
``thunder.jit`` with its mask built inside, calls ``reserve(cache_position)`` first.

7. **Passed back.** A cache passed into a second ``generate`` (HF's multi-turn use) goes on from the positions
   written: ``get_seq_length`` counts the positions reserved since the sequences started, not the non-zero slots
   of layer 0 (``StaticLayer``'s count, which stops at the window once a sliding layer wraps). The cache
   ``generate`` makes by default holds up to the model's ``max_position_embeddings``, as many as HF's
   ``DynamicCache`` it replaces, so the next turn fits.
"""

from __future__ import annotations

import copy
import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any

import thunder
import torch
from thunder.core.recipe import Lookaside, Plugin
from thunder.core.trace import is_tracing
from thunder.recipes import HFTransformers
from transformers import GenerationConfig, GenerationMixin, PretrainedConfig, StaticCache
from transformers.cache_utils import Cache, DynamicLayer, StaticLayer
from transformers.generation.utils import GenerationMode
from transformers.masking_utils import create_masks_for_generate

from thunder_ext.integrations.buckets import MIN_CAPACITY, capacity_for, checked_min_capacity
from thunder_ext.plugin import Inplace

log = logging.getLogger(__name__)


# transformers 4.56 made cache layers lazy: a layer allocates its buffers at its first write, from the states it
# is given, and a cache is built from its layers; 4.55 (thunder 0.2.6's pin) allocates them when it is made
LAZY_LAYERS = hasattr(StaticLayer, "lazy_initialization")


class GrowingLayer(StaticLayer):
    """A ``StaticLayer`` whose buffers hold ``capacity`` of its ``max_cache_len`` positions; with a ``window``, at
    most ``window`` of them, written circularly (rule 6)."""

    def __init__(self, max_cache_len: int, *args: Any, min_capacity: int = MIN_CAPACITY, window: int | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        # ``StaticLayer``'s arguments (4.55's ``sliding_window`` is HF's for every layer: ``window`` is this one's)
        self.min_capacity, self.window, self.is_sliding = min_capacity, window, window is not None
        self.pending = self.slots(min(min_capacity, max_cache_len))
        super().__init__(self.pending, *args, **kwargs)  # 4.55 allocates a bucket here, a lazy layer later
        self.max_cache_len = max_cache_len  # the limit, as HF reads it; the buffers hold ``capacity``

    def slots(self, capacity: int) -> int:
        """The positions the buffers hold for a bucket of ``capacity``: at most the window."""
        return capacity if self.window is None else min(capacity, self.window)

    @property
    def capacity(self) -> int:
        """The positions the buffers hold, or will hold when a lazy layer makes them."""
        return self.keys.shape[2] if self.keys is not None else self.pending

    def lazy_initialization(self, key_states: torch.Tensor) -> None:
        limit, self.max_cache_len = self.max_cache_len, self.pending  # StaticLayer allocates ``max_cache_len``
        try:
            super().lazy_initialization(key_states)
        finally:
            self.max_cache_len = limit

    def get_max_cache_shape(self) -> int:
        return self.capacity  # the buffers' length, which ``generate`` gives the attention mask

    def get_mask_sizes(self, cache_position: torch.Tensor) -> tuple[int, int]:
        if self.window is not None:
            raise NotImplementedError(
                "thunder_ext.GrowingStaticCache: a sliding-window layer writes its positions circularly, which HF's "
                "attention masks do not describe: call the model through generate(), which builds the mask with "
                "thunder_ext (sdpa or eager attention), or pass HF's StaticCache"
            )
        return self.capacity, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor,
               cache_kwargs: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """``StaticLayer.update``; in a sliding-window layer, the circular write of rule 6.

        Where the buffers are on the states' device already, HF's check of ``self.device`` is left out: thunder's
        interpreter gives the states its own ``Device``, which never equals a ``torch.device``, so the check assigned
        ``self.device`` at every traced call, and a call that assigns an attribute is not replayed
        (``thunder_ext/regional/replay.py``): every decoder layer was interpreted."""
        if self.keys is None:  # a lazy layer's first write
            self.lazy_initialization(key_states)
        if self.window is None and self.keys.device != key_states.device:
            return super().update(key_states, value_states, cache_kwargs)  # HF moves the buffers to the states
        positions = cache_kwargs.get("cache_position") if cache_kwargs else None
        key_states, value_states = key_states.to(self.keys.dtype), value_states.to(self.values.dtype)
        if self.window is None:
            if positions is None:  # HF's prefill of all positions
                self.keys.copy_(key_states)
                self.values.copy_(value_states)
            else:
                self.keys.index_copy_(2, positions, key_states)
                self.values.index_copy_(2, positions, value_states)
            return self.keys, self.values
        if positions.shape[0] == 1:
            slot = positions % self.window
            self.keys.index_copy_(2, slot, key_states)
            self.values.index_copy_(2, slot, value_states)
            return self.keys, self.values
        keys, values = torch.cat((self.keys, key_states), dim=2), torch.cat((self.values, value_states), dim=2)
        kept = min(positions.shape[0], self.keys.shape[2])  # the window's worth: each to a slot of its own
        slots = positions[-kept:] % self.window
        self.keys.index_copy_(2, slots, key_states[:, :, -kept:])
        self.values.index_copy_(2, slots, value_states[:, :, -kept:])
        return keys, values

    def resize(self, capacity: int, *, copy: bool) -> None:
        """Buffers for a bucket of ``capacity`` positions (at most the window), zeros past the first ones, which are
        copied if ``copy``."""
        capacity = self.slots(capacity)
        if capacity == self.capacity:
            return
        if self.keys is None:  # a lazy layer not written yet: it will allocate this bucket
            self.pending = capacity
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
    """HF's ``StaticCache`` grown in buckets (the module's rules). ``max_cache_len`` is the limit (the model's
    ``max_position_embeddings`` if None: a limit costs nothing until it is reached); ``min_capacity`` is the
    smallest bucket; ``max_batch_size``, ``device`` and ``dtype`` are ``StaticCache``'s (transformers 4.56 and later
    take them from the first write). ``generate`` takes it as ``past_key_values``::

        model.generate(ids, attention_mask=mask, past_key_values=thunder_ext.GrowingStaticCache(config=model.config))
    """

    def __init__(self, config: PretrainedConfig, max_cache_len: int | None = None, *, max_batch_size: int = 1,
                 min_capacity: int = MIN_CAPACITY, **kwargs: Any) -> None:  # fmt: skip
        checked_min_capacity("thunder_ext.GrowingStaticCache", min_capacity)
        text = config.get_text_config(decoder=True)
        limit = text.max_position_embeddings if max_cache_len is None else max_cache_len
        kinds = layer_kinds(text)
        if set(kinds) - {"full_attention", "sliding_attention"}:
            raise ValueError(
                "thunder_ext.GrowingStaticCache holds full-attention and sliding-window layers; this model has "
                f"{sorted(set(kinds) - {'full_attention', 'sliding_attention'})} layers: pass HF's StaticCache instead"
            )
        layer = functools.partial(GrowingLayer, min_capacity=min_capacity)
        windows = [text.sliding_window if kind == "sliding_attention" else None for kind in kinds]
        self.written = 0  # positions since the sequences started (rule 7): a wrapped window holds fewer
        if LAZY_LAYERS:
            Cache.__init__(self, layers=[layer(limit, window=w) for w in windows])
        else:  # each layer made now, not at its first write (``append_new_layers`` below)
            Cache.__init__(self, [functools.partial(layer, window=w) for w in windows], config=config,
                           max_batch_size=max_batch_size, max_cache_len=limit, **kwargs)  # fmt: skip
            Cache.append_new_layers(self, len(windows) - 1)

    def append_new_layers(self, layer_idx: int) -> None:
        """Nothing: every layer is made with the cache. (HF's compares ``layer_idx`` with the number of layers made,
        a use of each decoder layer's index that would keep a replay from giving a layer its own index:
        ``thunder_ext/regional/replay.py``.)"""

    def get_seq_length(self, layer_idx: int = 0, cache_position: torch.Tensor | None = None) -> int:
        """The positions written since the sequences started (rule 7). In traced code, HF's count of a layer's
        written slots, a tensor op: a number kept here would be a constant of the trace, new each token. (Kept on
        the cache, not its layers: thunder checks every number in a layer's ``__dict__``, which ``update`` reads.)"""
        if cache_position is not None or is_tracing():
            return super().get_seq_length(layer_idx, cache_position)
        return self.written

    def reset(self) -> None:
        self.written = 0
        super().reset()

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
        self.written = high + 1 if starts else max(self.written, high + 1)


def layer_kinds(text: PretrainedConfig) -> list[str]:
    """Each layer's kind of attention, as HF infers it where the config names none: all sliding, all chunked, or all
    full."""
    if getattr(text, "layer_types", None):
        return list(text.layer_types)
    if getattr(text, "sliding_window", None) is not None:
        kind = "sliding_attention"
    else:
        kind = "chunked_attention" if getattr(text, "attention_chunk_size", None) else "full_attention"
    return [kind] * text.num_hidden_layers


def use_growing_cache_by_default(model: object) -> None:
    """``model.generate()`` makes a ``GrowingStaticCache`` where it would have made HF's default ``DynamicCache``,
    which no entry point of thunder 0.2.6 can compile (the module's docstring): when the call passes no cache,
    names no cache implementation, and the model's configuration names none either; and builds that cache's mask
    by broadcasting (``masks_for_generate``). Anything that is not an HF model whose default is a dynamic cache is
    left as it is.

    transformers decides the default in ``GenerationMixin._prepare_cache_for_generation``, with no setting that a
    cache passed to ``generate`` would not then contradict ("passing both ``cache_implementation`` and
    ``past_key_values``"), so the model's own method is wrapped, on this instance only: it puts the cache where a
    caller's would be. Its arguments after the first two are positional in every version since 4.55, and differ:
    ``assistant_model, batch_size, max_cache_length, device`` (4.55), ``generation_mode, batch_size,
    max_cache_length`` (4.56 on).
    """
    if not isinstance(model, GenerationMixin) or "_prepare_cache_for_generation" in vars(model):
        return
    # not ``_can_compile_fullgraph``: HF's policy for torch.compile's whole graphs (MoE routing breaks them), which
    # neither a static cache nor thunderfx, whose splitter runs what thunder cannot take in PyTorch, needs
    if not model._supports_default_dynamic_cache():
        return
    prepare = model._prepare_cache_for_generation

    def prepare_growing_by_default(generation_config: GenerationConfig, model_kwargs: dict, *args: Any) -> Any:
        assistant_or_mode, batch_size, max_cache_length = args[:3]
        mode = (assistant_or_mode if isinstance(assistant_or_mode, GenerationMode)
                else generation_config.get_generation_mode(assistant_or_mode))  # fmt: skip
        named = generation_config.cache_implementation or getattr(
            model.config.get_text_config(decoder=True), "cache_implementation", None
        )
        if not generation_config.use_cache:  # refused here, before anything runs
            raise NotImplementedError(
                f"thunder_ext: {type(model).__name__}.generate(use_cache=False) cannot be compiled: HF builds the "
                "attention mask of a call without a cache with torch.vmap, which thunder 0.2.6 does not take; "
                "generate with its cache (the default, a thunder_ext.GrowingStaticCache written in place)"
            )
        # assisted generation and contrastive search roll their cache back, which only HF's dynamic cache does
        rolls_back = mode in (GenerationMode.ASSISTED_GENERATION, GenerationMode.CONTRASTIVE_SEARCH)
        if named is None and not rolls_back and generation_config.use_cache and model_kwargs.get("past_key_values") is None:
            sequences = max(generation_config.num_beams, generation_config.num_return_sequences) * batch_size
            # as many positions as the DynamicCache it replaces holds: a cache passed back takes the next turn
            limit = max(max_cache_length, model.config.get_text_config(decoder=True).max_position_embeddings)
            model_kwargs["past_key_values"] = GrowingStaticCache(
                model.config, limit, max_batch_size=sequences, device=model.device, dtype=model.dtype
            )
        return prepare(generation_config, model_kwargs, *args)

    model._prepare_cache_for_generation = prepare_growing_by_default
    model.create_masks_for_generate = functools.partial(
        masks_for_generate, getattr(model, "create_masks_for_generate", create_masks_for_generate)
    )
    log.info(
        "thunder_ext: %s.generate() without a cache of its own now uses thunder_ext.GrowingStaticCache, written in "
        "place, where HF would use DynamicCache, which thunder cannot compile", type(model).__name__,
    )  # fmt: skip


def masks_for_generate(make_masks: Callable, config: PretrainedConfig, input_embeds: torch.Tensor,
                       attention_mask: torch.Tensor | None, cache_position: torch.Tensor, past_key_values: Cache | None,
                       position_ids: torch.Tensor | None = None, **kwargs: Any) -> Any:  # fmt: skip
    """``generate``'s attention masks (``create_masks_for_generate``, which a model may define as its own) for a
    ``GrowingStaticCache``, as ``sdpa`` takes them (bool, batch x 1 x queries x keys) or ``eager`` (0 and the dtype's
    least value): each key attended where HF's mask attends its position (``attended``). HF builds its mask each
    step with ``torch.vmap`` over every position, milliseconds a token (docs/benchmarks.md); this broadcasts. Any
    other cache, attention or mask is ``make_masks``'s, but a sliding-window layer's, which only this describes."""
    text = config.get_text_config()
    overlaid = kwargs.get("or_mask_function") or kwargs.get("and_mask_function") or kwargs.get("token_type_ids") is not None
    if not isinstance(past_key_values, GrowingStaticCache) or attention_mask is None or attention_mask.ndim != 2:
        return make_masks(config, input_embeds, attention_mask, cache_position, past_key_values, position_ids, **kwargs)
    if text._attn_implementation not in ("sdpa", "eager") or overlaid:
        if any(layer.is_sliding for layer in past_key_values.layers):
            raise NotImplementedError(
                "thunder_ext.GrowingStaticCache: generate() builds the mask of a sliding-window layer, which writes "
                "its positions circularly, for sdpa and eager attention without an overlaid mask; this model has "
                f"{text._attn_implementation} attention{' and an overlaid mask' if overlaid else ''}: pass HF's "
                "StaticCache"
            )
        return make_masks(config, input_embeds, attention_mask, cache_position, past_key_values, position_ids, **kwargs)
    past_key_values.reserve(cache_position)  # where the cache grows
    kinds = layer_kinds(text)
    masks = {kind: attended(past_key_values.layers[kinds.index(kind)], cache_position, attention_mask.bool())
             for kind in set(kinds)}  # fmt: skip
    if text._attn_implementation == "eager":  # as HF's eager_mask makes it from the bool one
        least = torch.finfo(input_embeds.dtype).min
        zero = torch.tensor(0.0, device=cache_position.device, dtype=input_embeds.dtype)
        masks = {kind: torch.where(mask, zero, least) for kind, mask in masks.items()}
    # one mask per kind of layer where the config names them, as HF returns them
    return masks if hasattr(text, "layer_types") else masks[kinds[0]]


def attended(layer: GrowingLayer, cache_position: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """Which keys each query of a call at ``cache_position`` attends (batch x 1 x queries x keys) in ``layer``, its
    sequences' tokens ``padding`` (batch x positions; False where padded): a key whose position is written, not
    padded, not after the query, and, in a sliding-window layer, inside its window. The keys are the layer's slots,
    then, in a call of several tokens to a sliding-window layer, the call's own (rule 6)."""
    keys = torch.arange(layer.capacity, device=cache_position.device)  # a slot's position: its own while not wrapped
    queries = cache_position[:, None]
    if layer.window is not None:
        several = cache_position.shape[0] > 1
        last = cache_position[:1] - int(several)  # the last position the slots hold as the call reads them
        keys = last - (last - keys) % layer.window  # the latest position at or before it in each slot (< 0: none)
        keys = torch.cat((keys, cache_position)) if several else keys
    # (HF lets SDPA's is_causal stand for the causal part only where the cache is not compileable: never here)
    mask = (keys >= 0) & (keys <= queries)
    if layer.window is not None:
        mask &= keys > queries - layer.window
    return mask[None, None] & padding[:, keys.clamp(0, padding.shape[1] - 1)][:, None, None, :]


def refuse_dynamic_cache(*args: Any, **kwargs: Any) -> None:
    raise NotImplementedError(
        "thunder_ext: HF's DynamicCache (generate()'s default cache) grows by torch.cat, a new shape each step that "
        "thunder compiles anew: pass generate(..., past_key_values=thunder_ext.GrowingStaticCache(config=model.config)), "
        "written in place, or compile with recipe=thunder_ext.HFTransformersRecipe(), which uses it by default"
    )


def dynamic_cache_lookaside() -> Lookaside:
    """Under thunder's interpreter, a write into a ``DynamicCache`` raises ``refuse_dynamic_cache``'s error while
    tracing, before anything runs, instead of failing later in thunder."""
    return Lookaside(fn=DynamicLayer.update, replace_with=refuse_dynamic_cache)


def seeded_per_process(obj: object) -> tuple[str, ...]:
    """What of ``obj`` Python seeds per process: a ``GenerationConfig`` keeps ``hash()`` of its JSON text when made
    (``_original_object_hash``, for ``generate`` to tell whether it was changed), a string's hash."""
    return ("_original_object_hash",) if isinstance(obj, GenerationConfig) else ()


def warn_that_generate_runs_uncompiled(model: object, jitted: torch.nn.Module) -> None:
    """``thunder_ext.jit(model).generate(...)``, for an HF model, warns once that it runs ``model`` uncompiled:
    HF's ``generate`` calls the model it is bound to, and thunder's interpreter cannot trace an HF forward
    without the lookasides and transforms of thunder's recipe (its mask is made with ``torch.vmap``)."""
    if not isinstance(model, GenerationMixin):
        return
    jitted.generate = _saying_once(model.generate, lambda: warnings.warn(
        f"thunder_ext.jit({type(model).__name__}).generate() runs the model uncompiled: HF's generate calls the model "
        "itself. Compile an HF model with model.forward = thunder_ext.thunderfx(model.forward), or "
        "thunder.compile(model, recipe=thunder_ext.HFTransformersRecipe(), plugins='inplace')",
        stacklevel=3,  # the caller of generate, past this lambda and the wrapper
    ))  # fmt: skip


def _saying_once(fn: Callable, say: Callable[[], None]) -> Callable:
    """``fn``, which calls ``say()`` at its first call."""
    said = False

    @functools.wraps(fn)
    def saying(*args: Any, **kwargs: Any) -> Any:
        nonlocal said
        if not said:
            said = True
            say()
        return fn(*args, **kwargs)

    return saying


# generate()'s decoding loops other than _sample, which thunder's recipe binds to the compiled module with generate:
# beam search is bound too; the others, which roll back their cache or are not tried here, call the model uncompiled
COMPILED_LOOPS = ("_beam_search",)
UNCOMPILED_LOOPS = ("_assisted_decoding", "_contrastive_search", "_dola_decoding", "_group_beam_search",
                    "_constrained_beam_search")  # fmt: skip


def bind_decoding_loops(compiled: torch.nn.Module, model: GenerationMixin) -> None:
    """``compiled``'s decoding loops call ``compiled``: thunder's recipe binds ``generate`` and ``_sample`` only, so
    that beam search reached the uncompiled ``model`` through the compiled module's attribute lookup, silently. A
    loop that still calls ``model`` says so once, at INFO."""
    for name in COMPILED_LOOPS:
        if (loop := getattr(type(model), name, None)) is not None:
            setattr(compiled, name, functools.partial(loop, compiled))
    for name in UNCOMPILED_LOOPS:
        if (loop := getattr(model, name, None)) is not None:
            setattr(compiled, name, _saying_once(loop, functools.partial(
                log.info, "thunder_ext: %s.generate() runs %s with the model uncompiled: it rolls back its cache, "
                "which only HF's DynamicCache does and thunder 0.2.6 does not compile, or is not compiled by this "
                "recipe", type(model).__name__, name,
            )))  # fmt: skip


class HFTransformersRecipe(HFTransformers):
    """thunder's ``"hf-transformers"`` recipe, on any device, with ``generate()``'s default cache a
    ``GrowingStaticCache``: ``thunder.compile(model, recipe=thunder_ext.HFTransformersRecipe(), plugins="inplace")``.

    thunder 0.2.6's recipe takes no ``fuser`` and always lists nvFuser, which becomes ``None`` among its executors
    where nvFuser does not load (a CPU), and ``thunder.jit`` refuses that; this one takes torch.compile's there.

    The extension's plugin, where it leaves block programs to the default, is asked for them: HF's decoder layers then
    call one program (``thunder_ext/regional/programs.py``), which the default leaves off under the torch.compile
    executor (a call cuts Inductor's regions, which costs litgpt's blocks per token). On HF's Llama under this
    recipe on a CPU they measured faster each way: the first token of SmolLM2's shape 0.75x, per token 0.92x
    (docs/benchmarks.md).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if thunder.extend.get_executor("nvfuser") is None:
            self.executor_names[self.executor_names.index("nvfuser")] = "torchcompile"

    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        self.plugins = [_asking_for_block_programs(p) for p in self.plugins]
        use_growing_cache_by_default(model)
        compiled = super().apply(model)
        if isinstance(model, GenerationMixin):
            bind_decoding_loops(compiled, model)
            # ``generate`` makes the attention mask, and from it the cache's masks (``masks_for_generate``), only for
            # a forward whose signature names ``attention_mask``; a ThunderModule's takes ``*args, **kwargs``, so the
            # model made its masks inside the compiled forward, where a sliding-window layer's would be HF's
            forward = compiled.forward
            compiled.forward = functools.wraps(model.forward)(lambda *args, **kwargs: forward(*args, **kwargs))
        return compiled


def _asking_for_block_programs(plugin: Plugin) -> Plugin:
    """A copy of the extension's plugin asking for block programs where it leaves them to the default; any other
    plugin as it is."""
    if not isinstance(plugin, Inplace) or plugin.block_programs is not None:
        return plugin
    asking = copy.copy(plugin)
    asking.block_programs = True
    return asking
