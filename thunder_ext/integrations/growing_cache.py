"""``thunder_ext.set_kv_cache``: litgpt's KV cache grown in buckets with the positions it holds, and the calls
of the model fitted to those buckets, so that a decode step costs what the cache holds and each bucket
compiles once.

The rules, each with its test in ``tests/test_growing_cache.py``:

1. **Capacity.** A cache holds ``min_capacity * 2**k`` positions, capped at its limit (``max_seq_length``; a
   sliding-window layer's window): the smallest such bucket that holds every position written since the
   sequences started. Above ``min_capacity`` it holds less than twice what was written.
2. **Growth.** Before a call writes past the capacity, every buffer is copied once into a buffer of the
   bucket that holds the call (zeros past the copy, as litgpt's cache starts). The copy of a compiled model
   runs under ``thunder_ext.jit`` as ``new.index_copy_(2, arange(old_capacity), old)``, proved in place like
   the model's own writes; ``thunder_ext.inplace_decisions(model)`` lists its writes before the call's. thunder
   traces the copy's loop by running it on the proxies (``copy_into_larger``), not by interpreting it.
3. **New sequences.** A call that writes position 0 of every sequence starts them anew: the buffers take
   the bucket of what this call writes, nothing copied. Eager litgpt keeps the old sequences' positions
   past the new ones; no query reads them, since a query attends to the positions up to its own.
4. **Compiled calls** (what ``thunder_ext.jit`` or ``thunder.compile`` returns) are fitted to the bucket, so
   that a capacity compiles twice, a step of one token and a chunk of ``capacity // 8`` tokens:
   - the capacity goes in as ``input_pos_maxp1``: attention over the whole capacity (positions past a
     query are masked, so the value is eager's), and the capacity is an argument of the compiled call,
     which thunder checks even where a recipe prunes the checks of module buffers (``PrunePrologueChecks``);
   - a call of several tokens runs in chunks, the last one padded with copies of its last token at its
     last position: they write what that token writes and attend as it does, and their logits are dropped.
   An eager model runs its calls as they come, with litgpt's ``input_pos_maxp1``.
5. **Bad input** raises before anything is written or resized: a ``max_seq_length`` past the model's
   ``block_size``, more sequences than the cache holds, a position outside ``[0, max_seq_length)``, a call
   of more tokens than a sliding window holds.
6. **Compilations are logged** (``logging.getLogger("thunder_ext")``, INFO): the function, the bucket, the
   seconds, before and after each compilation that a new bucket brings.
7. **CUDA graphs keep their addresses.** thunder's ``CUDAGraphTransform`` captures a module buffer's address
   once per shape, and its replays read and write there; a bucket allocated anew (a new sequence after a
   growth) would leave a graph on the old bucket's freed memory. Under that transform every buffer and mask
   is kept once allocated, by layer and shape, across ``set_kv_cache`` calls too, and a bucket met again takes
   its kept buffers, zeroed (``BucketBuffers``): the buckets of every capacity reached stay allocated, at most
   about twice the largest.
8. **Larger buckets compile ahead.** The first compiled call at a capacity queues, for the same sequences, the
   one-token call (a decode step, with the growth copy into its bucket) at each larger bucket, then a prompt's
   chunk at each: a second process compiles them ahead, one after another, while this one generates
   (``thunder_ext/compile_cache/ahead.py``, where forking is sound and the compile cache is on). A growth, or a
   prompt in a new length bucket, then loads its call instead of tracing it, or waits for the second process if
   it is compiling that call: at most four times the longest compilation this process made, at least two
   minutes, after which the second process is stopped and the call compiles here. ``compile_ahead=False`` turns
   it off.
"""

from __future__ import annotations

import contextlib
import logging
import time
import types
from collections.abc import Callable, Iterator
from typing import NamedTuple

import thunder
import thunder.torch as ltorch
import torch
from litgpt.model import GPT, KVCache, batched_index_copy_, build_mask_cache
from thunder.core.module import ThunderModule
from thunder.core.proxies import TensorProxy
from thunder.core.trace import is_tracing
from thunder.transforms.cudagraph import CUDAGraphTransform

from thunder_ext.compile_cache import CompileCache, cache_loads
from thunder_ext.compile_cache.ahead import CompileAhead, unavailable
from thunder_ext.decisions import inplace_decisions
from thunder_ext.executors import inplace_ex
from thunder_ext.integrations.buckets import MIN_CAPACITY, capacity_for, checked_min_capacity
from thunder_ext.jit import jit
from thunder_ext.thunder026 import divert
from thunder_ext.thunder026.compiled import compiled_module, refresh_thunder_module
from thunder_ext.transforms import InplaceDecision, InplaceTransform

log = logging.getLogger(__name__)

# A wait for the second process (rule 8) lasts at most this many times the longest compilation made here, and at
# least WAIT_FLOOR_S: the same program at another capacity compiles in about the same time, and the first
# compilation, which sets the bound, is the slowest (thunder's first call in a process pays for its own imports).
WAIT_FACTOR, WAIT_FLOOR_S = 4, 120.0

# A chunk is a bucket's eighth: a prompt that starts a sequence takes at most 8 calls, and pads less than one.
CHUNKS_PER_CAPACITY = 8


class GrowingKVCache(KVCache):
    """litgpt's ``KVCache`` whose buffers hold ``capacity`` of the ``limit`` positions the layer may hold.

    It writes as litgpt's does (``index_copy_`` at ``input_pos``; a sliding-window layer at ``input_pos %
    capacity``, which is ``input_pos`` until the capacity reaches the window) and returns every position it
    holds. litgpt trims a sliding window's buffers to ``input_pos.max() + 1`` before they wrap, a shape that
    depends on the positions' values; the attention mask hides the same positions, so the trace of a step
    depends on the capacity only.
    """

    def __init__(self, template: KVCache, capacity: int, *, device: torch.device | None, dtype: torch.dtype | None):
        batch, groups, _, k_size = template.k.shape
        v_size = template.v.shape[-1]
        sliding = template.is_sliding_window
        super().__init__(
            (batch, groups, capacity, k_size), (batch, groups, capacity, v_size), device=device, dtype=dtype,
            is_sliding_window=sliding, sliding_window_size=template.sliding_window_size,
        )  # fmt: skip
        self.limit = template.max_cache_len

    def forward(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_sliding_window:
            return super().forward(input_pos, k, v)
        self.check_tokens(input_pos.shape[-1])
        positions = input_pos % self.max_cache_len
        bs = k.size(0)
        return batched_index_copy_(self.k[:bs, ...], -2, positions, k), batched_index_copy_(self.v[:bs, ...], -2, positions, v)

    def check_tokens(self, tokens: int) -> None:
        """litgpt's check of a sliding window: a call of more tokens would overwrite positions it reads."""
        if self.is_sliding_window and tokens > self.limit:
            raise ValueError(
                f"Prefill length ({tokens}) exceeds the sliding window size ({self.limit}): prefill in chunks of "
                f"at most {self.limit} tokens"
            )

    @torch.inference_mode(False)
    def empty_buffers(self, capacity: int) -> list[torch.Tensor]:
        """Buffers for ``capacity`` positions, zeros, as litgpt's cache starts; normal tensors, as litgpt's
        ``set_kv_cache`` makes them, even within ``generate``'s ``inference_mode``: Dynamo guards on the kind,
        so that the torch.compile executor's regions would compile again for each."""
        return [t.new_zeros(*t.shape[:2], capacity, t.shape[3]) for t in (self.k, self.v)]

    def use(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k, self.v, self.max_cache_len = k, v, k.shape[2]


def copy_into_larger(old: list[torch.Tensor], new: list[torch.Tensor]) -> None:
    """The growth copy: each buffer's positions into the first positions of its larger buffer, as an in-place
    ``index_copy_`` that the extension proves in place (a plain ``copy_`` of an argument stays a reported copy)."""
    for o, n in zip(old, new):
        n.index_copy_(2, torch.arange(o.shape[2], device=o.device), o)


def _traced_copy_into_larger(old: list[TensorProxy], new: list[TensorProxy]) -> None:
    """What thunder traces for a call of ``copy_into_larger``: the same ops, on the proxies, run rather than
    interpreted. thunder's interpreter handles a list of proxies in time that grows with its length at each step of
    the loop: the copy of SmolLM2's 60 buffers took 21 to 25 s to trace, each growth's stall before the model's
    own compilation."""
    for o, n in zip(old, new):
        ltorch.index_copy_(n, 2, ltorch.arange(o.shape[2], device=o.device), o)


divert(copy_into_larger, _traced_copy_into_larger)  # an entry for the extension's own function only


def _grow(old: list[torch.Tensor], new: list[torch.Tensor]) -> None:
    """What the growth's jit traces: one call, which thunder runs as ``_traced_copy_into_larger``."""
    copy_into_larger(old, new)


class BucketBuffers:
    """Where a bucket's buffers and attention mask come from: new ones each time, or (rule 7, a model compiled
    with thunder's ``CUDAGraphTransform``, ``keeps``) the first ones made for that layer and shape, kept so that a
    graph captured on a bucket finds it where it was captured. The kept ones live as long as the compiled module's
    ``forward``, and a later ``set_kv_cache`` of the same shapes takes them too."""

    def __init__(self, *, keeps: bool) -> None:
        self.keeps = keeps
        self.kept: dict[tuple, list[torch.Tensor]] = {}
        self.masks: dict[tuple, torch.Tensor] = {}

    @staticmethod
    def of(model: torch.nn.Module) -> BucketBuffers:
        """Kept buffers (the previous ``set_kv_cache``'s, if any) where thunder compiled ``model`` with CUDA graphs."""
        data = thunder.compile_data(model)
        if data is None or not any(isinstance(t, CUDAGraphTransform) for t in data.transforms):
            return BucketBuffers(keeps=False)
        previous = model.__dict__.get("forward")
        return previous.buffers if isinstance(previous, BucketedForward) else BucketBuffers(keeps=True)

    def of_layer(self, layer: int, cache: GrowingKVCache, capacity: int) -> list[torch.Tensor]:
        """Layer ``layer``'s buffers of ``capacity`` positions, shaped and placed as ``cache``'s, zeros (as
        litgpt's cache starts): kept ones zeroed again where kept."""
        if not self.keeps:
            return cache.empty_buffers(capacity)
        key = (layer, capacity, *((t.shape[:2], t.shape[3], t.dtype, t.device) for t in (cache.k, cache.v)))
        if key in self.kept:
            return [t.zero_() for t in self.kept[key]]
        self.kept[key] = cache.empty_buffers(capacity)
        return self.kept[key]

    def mask(self, gpt: GPT, capacity: int, device: torch.device | None) -> torch.Tensor:
        if not self.keeps:
            return _mask(gpt, capacity, device)
        key = (capacity, device, gpt.config.attention_logit_softcapping is None)
        if key not in self.masks:
            self.masks[key] = _mask(gpt, capacity, device)
        return self.masks[key]


@torch.inference_mode(False)  # normal tensors, wherever it is called (GrowingKVCache.empty_buffers)
def set_kv_cache(
    model: torch.nn.Module,
    *,
    batch_size: int,
    max_seq_length: int | None = None,
    rope_cache_length: int | None = None,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
    min_capacity: int = MIN_CAPACITY,
    compile_ahead: bool = True,
) -> None:
    """litgpt's ``GPT.set_kv_cache`` with caches that grow with the positions they hold (the module's rules).

    ``model`` is a litgpt ``GPT``, or what ``thunder_ext.jit(gpt)`` or ``thunder.compile(gpt, ...)`` (the
    ``thunder.jit`` interpreter) returns: the module that will be called, since the calls are fitted to the
    buckets there. ``max_seq_length`` (the model's if None) is the limit and becomes ``model.max_seq_length``;
    the other arguments are litgpt's, but for ``dtype``: the model's (its embedding's) where None, the dtype
    litgpt's own cache takes on its first call. ``min_capacity`` is the smallest bucket. ``compile_ahead``: a
    second process compiles the calls of each larger bucket ahead (rule 8).
    """
    gpt = _gpt_of(model)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"thunder_ext.set_kv_cache: `batch_size` must be a positive int, got {batch_size!r}")
    checked_min_capacity("thunder_ext.set_kv_cache", min_capacity)
    limit = gpt.max_seq_length if max_seq_length is None else max_seq_length
    if limit > gpt.config.block_size:
        raise ValueError(
            f"thunder_ext.set_kv_cache: `max_seq_length` {limit} is beyond the model's block_size "
            f"{gpt.config.block_size}"
        )
    if rope_cache_length is None:
        rope_cache_length = gpt.rope_cache_length()
    if dtype is None and gpt.transformer.wte.weight.is_floating_point():
        dtype = gpt.transformer.wte.weight.dtype  # litgpt's KVCache converts itself to it (self.k.to(k.dtype))
    changed = {}
    if limit != gpt.max_seq_length:
        gpt.max_seq_length = limit  # litgpt rebuilds its rope cache for the new length
        changed |= {name: getattr(gpt, name) for name in ("cos", "sin")}
    capacity = min(min_capacity, limit)
    buffers = BucketBuffers.of(model)
    for i, block in enumerate(gpt.transformer.h):
        # litgpt's own shapes and sliding windows, for the whole limit, without allocating them
        template = block.attn.build_kv_cache(batch_size, limit, rope_cache_length, torch.device("meta"), dtype)
        cache = GrowingKVCache(template, min(capacity, template.max_cache_len), device=device, dtype=dtype)
        if buffers.keeps:  # the cache made its own, which no graph has captured
            cache.use(*buffers.of_layer(i, cache, cache.max_cache_len))
        block.attn.kv_cache = cache
        changed |= {f"transformer.h.{i}.attn.kv_cache.{name}": getattr(cache, name) for name in ("k", "v")}
    gpt.mask_cache = buffers.mask(gpt, capacity, device)
    if isinstance(model, ThunderModule):
        refresh_thunder_module(model, changed)
    if isinstance(previous := model.__dict__.get("forward"), BucketedForward) and previous.ahead is not None:
        previous.ahead.close()  # its buckets are of caches no call will use
    model.forward = BucketedForward(model, gpt, batch_size, min_capacity, capacity, buffers, compile_ahead)


@torch.inference_mode(False)
def _mask(gpt: GPT, capacity: int, device: torch.device | None) -> torch.Tensor:
    """litgpt's attention mask for ``capacity`` positions, a normal tensor (``GrowingKVCache.empty_buffers``).

    Additive (0 where a query attends, -inf elsewhere) where the model softcaps its attention logits (Gemma-2):
    litgpt then adds the mask to the scores (``scores + mask``), and its boolean mask would add 1 and 0, hiding
    neither empty nor future positions. Eager litgpt is right there only because ``generate`` slices the
    positions to those written (``input_pos_maxp1``), which a compiled model is not told; a prefill through
    litgpt's cached path is not causal there, in eager too. SDPA, the path of every other model, reads either
    form alike, so they keep litgpt's boolean mask, a quarter of the bytes."""
    causal = build_mask_cache(capacity, device)
    if gpt.config.attention_logit_softcapping is None:
        return causal
    return torch.zeros(causal.shape, device=device).masked_fill_(~causal, float("-inf"))


def _gpt_of(model: torch.nn.Module) -> GPT:
    inner = compiled_module(model)
    if isinstance(inner, GPT):
        return inner
    if isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
        raise TypeError(
            "thunder_ext.set_kv_cache: `model` is compiled by torch.compile (thunder.compile's thunder.fx "
            "interpreter), whose calls it cannot fit to its buckets: use thunder_ext.jit(model) or "
            "thunder.compile with the thunder.jit interpreter"
        )
    raise TypeError(
        "thunder_ext.set_kv_cache: `model` must be a litgpt GPT, or what thunder_ext.jit or thunder.compile "
        f"returns for one; got {type(inner).__name__}"
    )


class BucketedForward:
    """The ``forward`` of the module ``set_kv_cache`` was given: each call fitted to the caches' buckets.

    ``thunder_ext.inplace_decisions`` lists the writes of the growth that the last call ran, if any, before
    the model's (``decisions_before``).
    """

    def __init__(self, model: torch.nn.Module, gpt: GPT, batch_size: int, min_capacity: int, capacity: int,
                 buffers: BucketBuffers, compile_ahead: bool = False):  # fmt: skip
        self.model, self.gpt, self.batch_size, self.min_capacity = model, gpt, batch_size, min_capacity
        self.capacity, self.buffers = capacity, buffers
        self.attentions = [block.attn for block in gpt.transformer.h]
        self.caches = [attn.kv_cache for attn in self.attentions]
        self.refreshed_for = self.caches  # the caches the compiled module was last given
        self.compiled = thunder.compile_data(model) is not None
        # the model's own forward, which thunder compiled (or litgpt's)
        self.forward = types.MethodType(type(model).forward, model)
        self.grow = jit(_grow, **_options_of(model)) if self.compiled else copy_into_larger
        self.grew = False  # whether the last call grew the caches
        self.shapes_seen: set[tuple] = set()
        self.longest_compile = 0.0  # seconds: rule 8's bound on a wait
        self.ahead = self._ahead() if compile_ahead and self.compiled else None

    def _ahead(self) -> CompileAhead | None:
        """Rule 8's second process, where it can run (captured CUDA graphs would find a child's buckets nowhere)."""
        why = "CUDA graphs capture each bucket's buffers" if self.buffers.keeps else unavailable([self.model, self.grow])
        if why is not None:
            log.info("thunder_ext: set_kv_cache: larger buckets compile when reached, not ahead: %s", why)
            return None
        return CompileAhead(self._compile_ahead, [self.model, self.grow], self._described)

    def __call__(self, idx: torch.Tensor, input_pos: torch.Tensor | None = None, input_pos_maxp1: int | None = None,
                 lm_head_chunk_size: int = 0) -> torch.Tensor | list[torch.Tensor]:  # fmt: skip
        if is_tracing() or torch.compiler.is_compiling():
            raise TypeError(
                "thunder_ext.set_kv_cache was given this GPT, which is now being compiled: give it the compiled "
                "module instead (what thunder_ext.jit(model) or thunder.compile(model, ...) returns), whose calls "
                "it fits to the cache's buckets"
            )
        self.grew = False
        current = [attn.kv_cache for attn in self.attentions]
        if current != self.refreshed_for and not self._holds_its_caches() and isinstance(self.model, ThunderModule):
            # litgpt's own clear_kv_cache or set_kv_cache since: the compiled module takes the model's new buffers,
            # once per set of caches (not at every call)
            refresh_thunder_module(self.model, dict(self.gpt.named_buffers()))
            self.refreshed_for = current
        if input_pos is None or not self._holds_its_caches() or not self._takes(idx, input_pos):
            # no cache, caches set anew by litgpt, or a call the model refuses with its own error
            return self.forward(idx, input_pos, input_pos_maxp1, lm_head_chunk_size)
        last = self._checked_last_position(idx, input_pos)
        # every sequence starting anew: nothing to keep (a single token's first position is its last)
        starts = last == 0 if idx.shape[1] == 1 else int(input_pos[..., 0].max()) == 0
        if self.ahead is not None:
            self.ahead.poll()
        if starts or last >= self.capacity:
            capacity = capacity_for(last + 1, self.min_capacity, self.gpt.max_seq_length)
            if self.ahead is not None and not lm_head_chunk_size:
                call = self._call_at(capacity, idx, input_pos, 1 if idx.shape[1] == 1 else None)
                self.ahead.wait_for(call, limit=max(WAIT_FLOOR_S, WAIT_FACTOR * self.longest_compile))
            self._set_capacity(capacity, copy=not starts)
        if not self.compiled:
            return self.forward(idx, input_pos, input_pos_maxp1, lm_head_chunk_size)
        if lm_head_chunk_size:  # a list of logits: one call at the capacity, compiled for its own length
            return self.forward(idx, input_pos, self.capacity, lm_head_chunk_size)
        length = 1 if idx.shape[1] == 1 else self.chunk_length(self.capacity)
        logits = [self._compiled_call(chunk, pos, n) for chunk, pos, n in _chunks(idx, input_pos, length)]
        return logits[0] if len(logits) == 1 else torch.cat(logits, dim=1)

    def chunk_length(self, capacity: int) -> int:
        """The tokens of one compiled call of several at ``capacity``: an eighth of it, at most the smallest window."""
        return min(max(1, capacity // CHUNKS_PER_CAPACITY), *(c.limit for c in self.caches))

    def decisions_before(self) -> list[InplaceDecision]:
        """The growth copy's decisions, if the last call grew the caches."""
        return inplace_decisions(self.grow) if self.grew and self.compiled else []

    def _holds_its_caches(self) -> bool:
        return all(attn.kv_cache is cache for attn, cache in zip(self.attentions, self.caches))

    def _takes(self, idx: torch.Tensor, input_pos: torch.Tensor) -> bool:
        """Whether the call has shapes litgpt accepts (``idx`` (B, T), ``input_pos`` (T,) or (B, T)) and at most
        ``max_seq_length`` tokens."""
        tokens = idx.shape[-1]
        if idx.dim() != 2 or input_pos.dim() not in (1, 2) or input_pos.shape[-1] != tokens:
            return False
        return 0 < tokens <= self.gpt.max_seq_length

    def _checked_last_position(self, idx: torch.Tensor, input_pos: torch.Tensor) -> int:
        """The largest position, once the call is known to fit the caches."""
        limit = self.gpt.max_seq_length
        if idx.shape[0] > self.batch_size:
            raise ValueError(
                f"`idx` holds {idx.shape[0]} sequences, but the KV cache holds {self.batch_size} "
                "(the batch_size given to thunder_ext.set_kv_cache)"
            )
        for cache in self.caches:
            cache.check_tokens(idx.shape[1])
        low, high = (int(p) for p in torch.aminmax(input_pos))
        if low < 0 or high >= limit:  # litgpt's own words for a position past max_seq_length
            raise ValueError(f"Positions in 'input_pos' must be in [0,{limit}): got positions from {low} to {high}")
        return high

    def _set_capacity(self, capacity: int, *, copy: bool) -> None:
        """Every cache at ``capacity`` (a sliding-window layer's at most its window), its positions copied if ``copy``."""
        if capacity == self.capacity:
            return
        resized = [(i, c) for i, c in enumerate(self.caches) if min(capacity, c.limit) != c.max_cache_len]
        old = [t for _, c in resized for t in (c.k, c.v)]
        new = [t for i, c in resized for t in self.buffers.of_layer(i, c, min(capacity, c.limit))]
        if copy and resized:
            self.grew = True
            if self.compiled:
                shapes = ("grow", *(t.shape for t in new))
                self._logged(self.grow, shapes, lambda: ("the growth copy", f"a KV cache of {capacity} positions"),
                             lambda: self.grow(old, new))  # fmt: skip
            else:
                self.grow(old, new)
        for (_, cache), k, v in zip(resized, new[0::2], new[1::2]):
            cache.use(k, v)
        self.gpt.mask_cache = self.buffers.mask(self.gpt, capacity, self.gpt.mask_cache.device)
        if isinstance(self.model, ThunderModule):
            changed = {f"transformer.h.{i}.attn.kv_cache.{n}": getattr(c, n) for i, c in resized for n in ("k", "v")}
            refresh_thunder_module(self.model, changed)
        self.capacity = capacity

    def _compiled_call(self, idx: torch.Tensor, input_pos: torch.Tensor, tokens: int) -> torch.Tensor:
        """The compiled call of one chunk, at the capacity; the logits of its first ``tokens`` tokens."""
        capacity = self.capacity
        shape = (idx.shape, input_pos.shape, capacity)
        if self.ahead is not None and shape not in self.shapes_seen:  # queued before this call compiles
            larger = [c for c in _buckets(self.min_capacity, self.gpt.max_seq_length) if c > capacity]
            steps = [self._call_at(c, idx, input_pos, tokens=1) for c in larger]
            self.ahead.add(steps + [self._call_at(c, idx, input_pos, tokens=None) for c in larger])

        def named() -> tuple[str, str]:
            return f"{type(self.gpt).__name__}.forward", self._bucket(idx.shape, capacity)

        logits = self._logged(self.model, shape, named, lambda: self.forward(idx, input_pos, capacity))
        return logits[:, :tokens]

    @staticmethod
    def _bucket(idx_shape: tuple[int, ...], capacity: int) -> str:
        (batch, length), s = idx_shape, lambda n: "s" if n > 1 else ""
        return f"{length} token{s(length)} x {batch} sequence{s(batch)}, KV cache of {capacity} positions"

    def _described(self, call: _Call) -> str:
        return f"{type(self.gpt).__name__}.forward for {self._bucket(call.idx.shape, call.capacity)}"

    def _call_at(self, capacity: int, idx: torch.Tensor, input_pos: torch.Tensor, tokens: int | None) -> _Call:
        """The compiled call at ``capacity`` of ``idx``'s sequences: of ``tokens`` tokens, or (None) a chunk."""
        length = self.chunk_length(capacity) if tokens is None else tokens
        return _Call(capacity, _Spec((idx.shape[0], length), idx.dtype, idx.device),
                     _Spec((*input_pos.shape[:-1], length), input_pos.dtype, input_pos.device))  # fmt: skip

    def _compile_ahead(self, call: _Call) -> None:
        """In the second process: compiles ``call`` (a step: with the growth copy from the bucket before) and saves
        it to the compile cache."""
        self.ahead = None
        step = call.idx.shape[1] == 1
        if step:  # the caches as the growth into the call's bucket finds them
            buckets = _buckets(self.min_capacity, self.gpt.max_seq_length)
            self._set_capacity(buckets[buckets.index(call.capacity) - 1], copy=False)
        self._set_capacity(call.capacity, copy=step)
        idx = torch.zeros(call.idx.shape, dtype=call.idx.dtype, device=call.idx.device)
        last = call.capacity - 1 if step else call.input_pos.shape[-1] - 1
        positions = torch.arange(last + 1 - call.input_pos.shape[-1], last + 1, device=call.input_pos.device)
        self._compiled_call(idx, positions.to(call.input_pos.dtype).expand(call.input_pos.shape), call.idx.shape[1])

    def _logged(self, compiled: Callable, shape: tuple, named: Callable[[], tuple[str, str]], call: Callable[[], object]):
        """``call()``, a call of the thunder-compiled ``compiled``. The first call of each ``shape`` is logged before
        and after, with its compile time, as ``named()`` names the function and the bucket. Any call can compile
        (a torch.compile region recompiles where its guards fail): each keeps this process forkable for rule 8."""
        forkable = self.ahead.forkable() if self.ahead is not None else contextlib.nullcontext()
        if shape in self.shapes_seen:
            with forkable:
                return call()
        self.shapes_seen.add(shape)
        name, bucket = named()
        log.info("thunder_ext: compiling %s for %s ...", name, bucket)
        misses, loaded, start = thunder.cache_misses(compiled), cache_loads(compiled), time.perf_counter()
        with forkable:
            result = call()
        seconds = time.perf_counter() - start
        if cache_loads(compiled) > loaded:  # thunder counts it a miss too
            log.info("thunder_ext: loaded %s for %s from the compile cache in %.1f s", name, bucket, seconds)
        elif thunder.cache_misses(compiled) > misses:
            self.longest_compile = max(self.longest_compile, seconds)
            log.info("thunder_ext: compiled %s for %s in %.1f s", name, bucket, seconds)
        else:
            log.info("thunder_ext: %s for %s was compiled already", name, bucket)
        return result


class _Spec(NamedTuple):
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device


class _Call(NamedTuple):
    """A compiled call at a bucket, as rule 8 compiles it ahead."""

    capacity: int
    idx: _Spec
    input_pos: _Spec


def _buckets(min_capacity: int, limit: int) -> list[int]:
    """Every capacity a cache of ``limit`` positions takes, smallest first."""
    buckets = [min(min_capacity, limit)]
    while buckets[-1] < limit:
        buckets.append(capacity_for(buckets[-1] + 1, min_capacity, limit))
    return buckets


def _options_of(model: torch.nn.Module) -> dict:
    """``thunder_ext.jit``'s options that ``model`` was compiled with: its executors (without the extension's,
    which the jit adds), the extension's ``strict``, and its ``compile_cache`` (None, as ``THUNDER_EXT_CACHE`` says,
    where ``model`` was compiled without the extension)."""
    data = thunder.compile_data(model)
    transform = next((t for t in data.transforms if isinstance(t, InplaceTransform)), None)
    strict = transform is not None and transform.strict
    cache = next((t for t in data.transforms if isinstance(t, CompileCache)), None)
    cached = None if transform is None else cache.requested if cache is not None else False
    return {"executors": [e for e in data.executors_list if e is not inplace_ex], "strict": strict,
            "compile_cache": cached}  # fmt: skip


def _chunks(idx: torch.Tensor, input_pos: torch.Tensor, length: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
    """``(idx, input_pos, tokens)`` of ``length`` tokens each; the last chunk's ``tokens`` real ones are followed
    by copies of its last token at its last position."""
    total = idx.shape[1]
    for start in range(0, total, length):
        tokens = min(length, total - start)
        chunk, pos = idx[:, start : start + tokens], input_pos[..., start : start + tokens]
        if tokens < length:
            pad = length - tokens
            chunk = torch.cat([chunk, chunk[:, -1:].expand(-1, pad)], dim=1)
            pos = torch.cat([pos, pos[..., -1:].expand(*pos.shape[:-1], pad)], dim=-1)
        yield chunk, pos, tokens
