"""The capacity buckets a growing cache takes (``thunder_ext.set_kv_cache``, ``thunder_ext.GrowingStaticCache``):
``min_capacity * 2**k``, so that a bucket holds less than twice what was written above the floor, the growth
copies cost O(1) per token amortized, and each bucket compiles once."""

from __future__ import annotations

# The smallest bucket: a 16-token prompt and 112 new tokens before the first growth (docs/benchmarks.md).
MIN_CAPACITY = 128


def capacity_for(positions: int, min_capacity: int, limit: int) -> int:
    """The smallest bucket, ``min_capacity`` times a power of two, that holds ``positions``, capped at ``limit``."""
    capacity = min_capacity
    while capacity < positions:
        capacity *= 2
    return min(capacity, limit)


def checked_min_capacity(owner: str, min_capacity: object) -> int:
    if isinstance(min_capacity, bool) or not isinstance(min_capacity, int) or min_capacity < 1:
        raise ValueError(f"{owner}: `min_capacity` must be a positive int, got {min_capacity!r}")
    return min_capacity
