"""KV-cache writes as each stack writes them: one decode step's write into K and V caches of length S.

Each idiom is the write as its stack spells it, in a module or function of its own shape: litgpt's
``KVCache`` itself (a slice of the batch, a row of positions per sequence, a sliding window), a module
written like Hugging Face transformers' ``StaticCache.update``, gpt-fast's setitem, a vLLM-style paged
cache written at a slot mapping through a flattened view, and ``thunder_ext.tensor_scatter_`` in its
three forms. ``tests/test_kv_idioms.py`` checks each against eager; this case times them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from litgpt.model import KVCache

import thunder_ext
from thunder_ext.benchmarks.measure import RUNNERS, Allocations, allocations, compiled, interleaved_medians
from thunder_ext.benchmarks.report import Table, Target, ratio, us

BATCH, HEADS, HEAD_SIZE = 2, 4, 64
BLOCK = 16  # tokens per block of the paged cache


@dataclass
class Setup:
    """What one idiom writes: a fresh function or module, its arguments, and the caches it writes."""

    fn: Callable
    args: list
    caches: list[torch.Tensor]


def _tokens(n: int = 1, batch: int = BATCH, gen: torch.Generator | None = None) -> list[torch.Tensor]:
    """New keys and values, (batch, heads, n, head size) each."""
    return [torch.randn(batch, HEADS, n, HEAD_SIZE, generator=gen) for _ in range(2)]


def _zeros(*shape: int) -> list[torch.Tensor]:
    return [torch.zeros(shape) for _ in range(2)]


class LitgptStep(torch.nn.Module):
    """litgpt's ``KVCache`` written as ``CausalSelfAttention`` writes it."""

    def __init__(self, size: int, batch: int, **window):
        super().__init__()
        self.kv_cache = KVCache((batch, HEADS, size, HEAD_SIZE), (batch, HEADS, size, HEAD_SIZE), **window)

    def forward(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        return self.kv_cache(input_pos, k, v)


def _litgpt(module: LitgptStep, input_pos: torch.Tensor, gen: torch.Generator) -> Setup:
    return Setup(module, [input_pos, *_tokens(gen=gen)], [module.kv_cache.k, module.kv_cache.v])


def litgpt_slice(size: int, gen: torch.Generator) -> Setup:
    # a cache for 4 sequences, a step of 2: litgpt writes `self.k[:bs].index_copy_(2, input_pos, k)`
    return _litgpt(LitgptStep(size, batch=2 * BATCH), torch.tensor([size // 2]), gen)


def litgpt_per_sequence(size: int, gen: torch.Generator) -> Setup:
    # a (B, 1) input_pos: litgpt loops over the batch, `t[i].index_copy_(...)` per sequence
    return _litgpt(LitgptStep(size, batch=BATCH), torch.tensor([[size // 2], [size // 3]]), gen)


def litgpt_sliding_window(size: int, gen: torch.Generator) -> Setup:
    # past the window: litgpt writes at `input_pos % max_cache_len`
    module = LitgptStep(size, batch=BATCH, is_sliding_window=True, sliding_window_size=size)
    return _litgpt(module, torch.tensor([size + size // 2]), gen)


class StaticCacheLike(torch.nn.Module):
    """A cache written as transformers' ``StaticCache.update`` writes a layer: ``index_copy_`` on axis 2
    at ``cache_position``, both caches returned whole."""

    def __init__(self, size: int, layers: int = 2):
        super().__init__()
        for i in range(layers):
            self.register_buffer(f"key_cache_{i}", torch.zeros(BATCH, HEADS, size, HEAD_SIZE), persistent=False)
            self.register_buffer(f"value_cache_{i}", torch.zeros(BATCH, HEADS, size, HEAD_SIZE), persistent=False)

    def forward(self, key_states, value_states, layer_idx: int, cache_position: torch.Tensor):
        k_out, v_out = getattr(self, f"key_cache_{layer_idx}"), getattr(self, f"value_cache_{layer_idx}")
        k_out.index_copy_(2, cache_position, key_states.to(k_out.dtype))
        v_out.index_copy_(2, cache_position, value_states.to(v_out.dtype))
        return k_out, v_out


def hf_static_cache(size: int, gen: torch.Generator) -> Setup:
    module = StaticCacheLike(size)
    return Setup(module, [*_tokens(gen=gen), 1, torch.tensor([size // 2])], [module.key_cache_1, module.value_cache_1])


class GptFastCache(torch.nn.Module):
    """gpt-fast's ``KVCache.update``: setitem with a tensor of positions."""

    def __init__(self, size: int):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(BATCH, HEADS, size, HEAD_SIZE), persistent=False)
        self.register_buffer("v_cache", torch.zeros(BATCH, HEADS, size, HEAD_SIZE), persistent=False)

    def forward(self, input_pos: torch.Tensor, k_val: torch.Tensor, v_val: torch.Tensor):
        k_out, v_out = self.k_cache, self.v_cache
        k_out[:, :, input_pos] = k_val
        v_out[:, :, input_pos] = v_val
        return k_out, v_out


def gpt_fast_setitem(size: int, gen: torch.Generator) -> Setup:
    module = GptFastCache(size)
    return Setup(module, [torch.tensor([size // 2]), *_tokens(gen=gen)], [module.k_cache, module.v_cache])


def write_paged(key_cache, value_cache, key, value, slot_mapping):
    """A paged cache (blocks, block size, heads, head size): token i goes to slot ``slot_mapping[i]`` of
    the cache seen as one row of slots, as vLLM's reference ``reshape_and_cache`` writes it."""
    key_cache.view(-1, HEADS, HEAD_SIZE)[slot_mapping] = key
    value_cache.view(-1, HEADS, HEAD_SIZE)[slot_mapping] = value


def paged_slot_mapping(size: int, gen: torch.Generator) -> Setup:
    caches = _zeros(BATCH * size // BLOCK, BLOCK, HEADS, HEAD_SIZE)  # a pool of B * S slots
    tokens = [t[:, :, 0] for t in _tokens(gen=gen)]  # (tokens, heads, head size)
    slots = torch.tensor([size // 2 + 3, BLOCK + 5])  # two sequences, in blocks far apart
    return Setup(write_paged, [*caches, *tokens, slots], caches)


def scatter_kv(k, v, new_k, new_v, write_indices, cu_seqlens=None, mode: str = "linear"):
    thunder_ext.tensor_scatter_(k, new_k, write_indices, mode=mode, cu_seqlens=cu_seqlens)
    thunder_ext.tensor_scatter_(v, new_v, write_indices, mode=mode, cu_seqlens=cu_seqlens)


def tensor_scatter_linear(size: int, gen: torch.Generator) -> Setup:
    caches = _zeros(BATCH, HEADS, size, HEAD_SIZE)
    return Setup(scatter_kv, [*caches, *_tokens(gen=gen), torch.tensor([size // 2, size // 3])], caches)


def tensor_scatter_circular(size: int, gen: torch.Generator) -> Setup:
    # two tokens per sequence from the last slot: each write wraps to slot 0
    caches = _zeros(BATCH, HEADS, size, HEAD_SIZE)
    args = [*caches, *_tokens(2, gen=gen), torch.tensor([size - 1, 2 * size - 1]), None, "circular"]
    return Setup(scatter_kv, args, caches)


def tensor_scatter_packed(size: int, gen: torch.Generator) -> Setup:
    # three sequences of 1, 3 and 2 tokens packed into one (6, heads, head size) update
    caches = _zeros(3, HEADS, size, HEAD_SIZE)
    tokens = [t[0].transpose(0, 1).contiguous() for t in _tokens(6, batch=1, gen=gen)]
    args = [*caches, *tokens, torch.tensor([size // 2, 0, size - 2]), torch.tensor([0, 1, 4, 6])]
    return Setup(scatter_kv, args, caches)


IDIOMS: dict[str, Callable[[int, torch.Generator], Setup]] = {
    f.__name__: f
    for f in (
        litgpt_slice, litgpt_per_sequence, litgpt_sliding_window, hf_static_cache, gpt_fast_setitem,
        paged_slot_mapping, tensor_scatter_linear, tensor_scatter_circular, tensor_scatter_packed,
    )
}  # fmt: skip


def setup(idiom: str, size: int) -> Setup:
    """The same caches and inputs on every call (the runners and eager get equal copies)."""
    return IDIOMS[idiom](size, torch.Generator().manual_seed(0))


SIZES = (256, 16384)
Result = dict[int, tuple[dict[str, float], dict[str, Allocations]]]


def configs(quick: bool) -> list[str]:
    return list(IDIOMS)


def measure(idiom: str, device: torch.device, quick: bool) -> Result:
    if device.type != "cpu":
        raise NotImplementedError("kv_idioms runs on the CPU (its caches are built there)")
    calls = {}
    for size in SIZES:
        for runner in RUNNERS:
            s = setup(idiom, size)
            calls[runner, size] = lambda fn=compiled(runner, s.fn), args=s.args: fn(*args)
    # 100 calls as kv_write: with 40 on this shared 2-core machine, one run put a write that eager runs in
    # the same time at both sizes at 1.20x
    times = interleaved_medians(calls, device, warmup=5, repeat=20 if quick else 100)
    return {
        size: ({r: times[r, size] for r in RUNNERS}, {r: allocations(calls[r, size], device) for r in RUNNERS})
        for size in SIZES
    }


def report(results: dict[str, Result]) -> Table:
    small, large = SIZES
    table = Table(
        name="kv_idioms",
        title="KV-cache write idioms: time and bytes allocated per write",
        setup=(
            f"One decode step's write into K and V caches of S positions ({BATCH} sequences, 3 in the packed form; "
            f"{HEADS} heads, head size {HEAD_SIZE}, float32), as each stack writes it (`benchmarks/kv_idioms.py`). "
            "Median µs per call (one call writes K and V), runners and sizes interleaved; bytes: all tensor memory "
            "one call allocates."
        ),
        columns=["idiom", "S", *(f"{r} µs" for r in RUNNERS), f"thunder_ext at S / at {small}",
                 *(f"{r} bytes" for r in RUNNERS)],  # fmt: skip
    )
    flat, allocated = {}, {}
    for idiom, by_size in results.items():
        base = by_size[small][0]["thunder_ext.jit"]
        for size, (times, allocs) in by_size.items():
            table.rows.append(
                [idiom, str(size), *(us(times[r]) for r in RUNNERS), ratio(times["thunder_ext.jit"], base),
                 *(f"{allocs[r].total:,}" for r in RUNNERS)]  # fmt: skip
            )
        flat[idiom] = by_size[large][0]["thunder_ext.jit"] / base
        allocated[idiom] = by_size[large][1]["thunder_ext.jit"].largest
    cache_bytes = BATCH * HEADS * large * HEAD_SIZE * 4
    slow = [f"{i} {x:.2f}x" for i, x in flat.items() if x > 1.2]
    big = [f"{i} {b:,} bytes" for i, b in allocated.items() if b >= cache_bytes]
    table.targets = [
        Target(f"thunder_ext time at S={large} within 1.2x of S={small}, every idiom",
               ", ".join(slow) or f"{max(flat.values()):.2f}x at most", not slow),  # fmt: skip
        Target(f"thunder_ext: no cache-sized allocation ({cache_bytes:,} bytes) per write, every idiom",
               ", ".join(big) or f"{max(allocated.values()):,} bytes largest", not big),  # fmt: skip
    ]
    return table
