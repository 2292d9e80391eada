"""A session of prompts of new lengths: litgpt's ``generate`` of 14 prompts, 5 to 270 tokens, 8 new tokens
each, in wall time with every compilation, as a user's first session runs them.

Each runner runs the whole session in a fresh process of its own, with an empty Inductor cache, so that no
runner reuses what another compiled. The growing cache's prompts are grouped by the bucket their length
falls in (``thunder_ext.integrations.growing_cache.capacity_for``), to count what each bucket compiles.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import torch

from thunder_ext.benchmarks.compile_time import in_fresh_process
from thunder_ext.benchmarks.generate import (
    DYNAMIC,
    EAGER,
    GROWING,
    RUNNERS,
    compiled_so_far,
    generate,
    prompt,
    runner,
)
from thunder_ext.benchmarks.measure import gc_paused, status
from thunder_ext.benchmarks.report import Table, Target, ratio
from thunder_ext.tools.demo_model import small_model

LENGTHS = (5, 7, 10, 14, 19, 26, 36, 50, 69, 95, 131, 180, 230, 270)
NEW = 8
MAX_SEQ_LENGTH = 8192


@dataclass
class Session:
    seconds: list[float]  # per prompt, compilation included
    compiled: list[int]  # per prompt: thunder cache entries (with the growth copy's) or Dynamo graphs it added
    tokens: list[list[int]]


def configs(quick: bool) -> list[str]:
    return list(RUNNERS)


def measure(name: str, device: torch.device, quick: bool) -> Session:
    status(f"{name}: the session in a fresh process")
    lengths = LENGTHS[:4] if quick else LENGTHS
    return in_fresh_process(_session, name, lengths, torch.get_num_threads())


def _session(name: str, lengths: tuple[int, ...], threads: int) -> Session:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunder-ext-session-")  # nothing compiled before
    torch.set_num_threads(threads)
    model = runner(name, small_model(MAX_SEQ_LENGTH))
    session = Session([], [], [])
    with gc_paused():  # compilations all along; thunder's interpreter walks Dynamo's registry (measure.gc_paused)
        for i, length in enumerate(lengths):
            before = compiled_so_far(name, model)
            start = time.perf_counter()
            tokens = generate(model, prompt(length, seed=i), NEW)
            session.seconds.append(time.perf_counter() - start)
            session.compiled.append(compiled_so_far(name, model) - before)
            session.tokens.append(tokens.tolist())
    return session


def report(results: dict[str, Session]) -> Table:
    from thunder_ext.integrations.growing_cache import MIN_CAPACITY, capacity_for

    lengths = LENGTHS[: len(results[EAGER].seconds)]
    table = Table(
        name="generate_session",
        title="A session of prompts of new lengths: wall time with every compilation",
        setup=(
            f"litgpt's `generate` of the demo model (max_seq_length {MAX_SEQ_LENGTH}), {len(lengths)} prompts of "
            f"{lengths[0]} to {lengths[-1]} tokens, {NEW} new tokens each, one after another as a user's first "
            "session: each runner in a fresh process with an empty Inductor cache. Seconds per prompt, compilation "
            "included, and what each prompt compiled (thunder cache entries, with the growth copy's; Dynamo graphs)."
        ),
        columns=["prompt tokens", "growing-cache bucket", *(f"{r} s (compiled)" for r in RUNNERS)],
    )
    buckets = [capacity_for(length, MIN_CAPACITY, MAX_SEQ_LENGTH) for length in lengths]
    for i, (length, bucket) in enumerate(zip(lengths, buckets)):
        cells = [f"{results[r].seconds[i]:.2f} ({results[r].compiled[i]})" for r in RUNNERS]
        table.rows.append([str(length), str(bucket), *cells])
    table.rows.append(["all", "", *(f"**{sum(results[r].seconds):.1f}** ({sum(results[r].compiled)})" for r in RUNNERS)])
    table.targets = _targets(results, buckets)
    return table


def _targets(results: dict[str, Session], buckets: list[int]) -> list[Target]:
    growing = results[GROWING]
    per_bucket = {b: sum(c for c, bb in zip(growing.compiled, buckets) if bb == b) for b in dict.fromkeys(buckets)}
    seen_again = [c for i, c in enumerate(growing.compiled) if buckets[i] in buckets[:i]]
    wall, dynamic = sum(growing.seconds), sum(results[DYNAMIC].seconds)
    differ = [r for r in RUNNERS if results[r].tokens != results[EAGER].tokens]
    return [
        Target(f"{GROWING}: at most 2 compilations per length bucket",
               ", ".join(f"{b}: {c}" for b, c in per_bucket.items()), max(per_bucket.values()) <= 2),
        Target(f"{GROWING}: a prompt in a bucket already seen compiles nothing",
               f"{sum(seen_again)} compilations over {len(seen_again)} such prompts", not any(seen_again)),
        Target(f"{GROWING}: session wall time at most 2x {DYNAMIC}'s", ratio(wall, dynamic), wall <= 2 * dynamic),
        Target("every runner's tokens equal eager's", "all" if not differ else "not: " + ", ".join(differ), not differ),
    ]  # fmt: skip
