"""``set_kv_cache``'s rule 8 and ``thunder_ext/compile_cache/ahead.py``'s rules: the larger buckets' calls compiled
ahead by a forked process and handed back through the compile cache, against eager litgpt on the same weights.

One-layer models, buckets of 16, 32 and 64 positions (a prompt's chunk: 2, 4 and 8 tokens); the compile cache on, in a folder of the test's
own (the suite runs with it off).
"""

import copy
import importlib
import logging
import os
import threading
import time

import pytest
import thunder
import torch
from helpers import VOCAB, caches, small_llama
from torch.testing import assert_close

import thunder_ext

litgpt = pytest.importorskip("litgpt", reason="litgpt is not installed (pip install '.[test]')")

from thunder_ext.compile_cache.ahead import CompileAhead
from thunder_ext.integrations import growing_cache
from thunder_ext.integrations.growing_cache import BucketedForward
from thunder_ext.thunder026.cache_entries import NotStorable

# Compiling ahead forks, which it refuses beside other threads: under pytest-xdist each test runs in a fresh
# process of one thread (tests/conftest.py).
pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="compiling ahead forks a process"),
              pytest.mark.single_threaded]  # fmt: skip

LIMIT, MIN_CAPACITY, PROMPT = 64, 16, 3


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("THUNDER_EXT_CACHE", "1")
    monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def eager_and_jitted(*, compile_ahead: bool = True):
    torch.manual_seed(0)
    eager = small_llama(n_layer=1)
    jitted = thunder_ext.jit(copy.deepcopy(eager), strict=True)
    eager.set_kv_cache(batch_size=1, max_seq_length=LIMIT)
    thunder_ext.set_kv_cache(jitted, batch_size=1, max_seq_length=LIMIT, min_capacity=MIN_CAPACITY,
                             compile_ahead=compile_ahead)  # fmt: skip
    return eager, jitted


def ahead_of(jitted) -> CompileAhead:
    return jitted.forward.ahead


def finish(ahead: CompileAhead) -> None:
    """Waits for the second process to compile everything queued."""
    while ahead.child is not None or ahead.queue:
        if ahead.child is None:
            ahead.poll()
        else:
            ahead.wait_for(ahead.child.target, limit=600)


def decode_both(eager, jitted, positions: range) -> None:
    """Each position's token through both models, their logits compared."""
    g = torch.Generator().manual_seed(1)
    for p in positions:
        token = torch.randint(0, VOCAB, (1, 1), generator=g)
        pos = torch.tensor([p])
        assert_close(
            jitted(token, pos), eager(token, pos, input_pos_maxp1=p + 1), msg=lambda m, p=p: f"position {p}: {m}"
        )


def prefill_both(eager, jitted) -> None:
    prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    assert_close(jitted(prompt, torch.arange(PROMPT)), eager(prompt, torch.arange(PROMPT), input_pos_maxp1=PROMPT))


def assert_caches_hold_eagers(jitted, eager, positions: int) -> None:
    for ours, theirs in zip(caches(jitted._model), caches(eager)):
        assert_close(ours[:, :, :positions], theirs[:, :, :positions])


def generated_ahead(caplog, end: int):
    """Both models after the prompt, the second process's whole queue, then decoding up to position ``end``."""
    caplog.set_level(logging.INFO, logger="thunder_ext")
    eager, jitted = eager_and_jitted()
    with torch.inference_mode():
        prefill_both(eager, jitted)
        finish(ahead_of(jitted))
        decode_both(eager, jitted, range(PROMPT, end))
    return eager, jitted


def compiled_here(jitted) -> int:
    """The compilations this process made: thunder's misses, less the entries loaded (a load counts as a miss)."""
    return thunder.cache_misses(jitted) - thunder_ext.cache_loads(jitted)


def ahead_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "ahead" in r.getMessage() or "waited" in r.getMessage()]


def test_each_growth_and_new_length_bucket_runs_the_call_compiled_ahead_with_eagers_logits_and_caches(
    cache_on, caplog, monkeypatch, tmp_path
):
    # Inductor's cache cold, as on a fresh machine: where the torch.compile executor's kernels compile, Inductor
    # would start threads in this process, and a child forked beside them waits forever (the CI run of 2026-12-07)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    eager, jitted = generated_ahead(caplog, 60)  # growths at 16 and 32
    assert_caches_hold_eagers(jitted, eager, 60)
    # compiled here: the prompt's chunk and the step at 16; every larger bucket's step and growth copy was loaded
    assert compiled_here(jitted) == 2
    with torch.inference_mode():
        for length in (20, 40):  # prompts of new sequences in the buckets of 32 and 64: their chunks were loaded
            prompt = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(length))
            eager.set_kv_cache(batch_size=1, max_seq_length=LIMIT)
            expected = eager(prompt, torch.arange(length), input_pos_maxp1=length)
            assert_close(jitted(prompt, torch.arange(length)), expected)
            assert_caches_hold_eagers(jitted, eager, length)
    assert compiled_here(jitted) == 2
    assert compiled_here(jitted.forward.grow) == 0
    compiled = [f"{n} x 1 sequence, KV cache of {c} positions ahead in a second process"
                for n, c in [("1 token", 32), ("1 token", 64), ("4 tokens", 32), ("8 tokens", 64)]]  # fmt: skip
    logged = ahead_lines(caplog)
    assert all(sum(c in line for line in logged) == 1 for c in compiled), logged
    assert [(c.capacity, c.idx.shape) for c in ahead_of(jitted).handed_back] == [
        (32, (1, 1)),
        (64, (1, 1)),
        (32, (1, 4)),
        (64, (1, 8)),
    ]
    decisions = thunder_ext.inplace_decisions(jitted)
    assert decisions and not [d for d in decisions if d.how == "copy"], decisions
    assert threading.active_count() == 1, threading.enumerate()  # this process stayed forkable


@pytest.mark.executor_sets("defaults")
def test_a_thread_started_after_set_up_stops_the_compiling_ahead_at_the_next_fork(cache_on, caplog):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    eager, jitted = eager_and_jitted()
    stop = threading.Event()
    with torch.inference_mode():
        prefill_both(eager, jitted)  # forks the first child, for the step at 32
        thread = threading.Thread(target=stop.wait, name="the user's thread")
        thread.start()
        try:
            decode_both(eager, jitted, range(PROMPT, 40))  # the growth to 32 takes the first child's step
        finally:
            stop.set()
            thread.join()
    assert_caches_hold_eagers(jitted, eager, 40)
    assert [(c.capacity, c.idx.shape) for c in ahead_of(jitted).handed_back] == [(32, (1, 1))]
    stopped = [line for line in ahead_lines(caplog) if line.startswith("thunder_ext: no more is compiled ahead")]
    assert stopped == ["thunder_ext: no more is compiled ahead: other Python threads run in this process (the "
                       "user's thread), whose locks a forked process could find held"], ahead_lines(caplog)  # fmt: skip
    assert ahead_of(jitted).closed and ahead_of(jitted).child is None and not ahead_of(jitted).queue
    assert compiled_here(jitted) == 3  # the prompt's chunk, the steps at 16 and 64; the step at 32 was loaded


@pytest.mark.executor_sets("defaults")
def test_every_entry_a_compilation_when_reached_saves_is_one_the_second_process_saved(tmp_path, monkeypatch):
    """The second process compiles what this one would: each entry file (prologue, computation, decisions) that
    the same run without compiling ahead saves, byte for byte, is among those it saved."""
    saved = {}
    for ahead in (True, False):
        folder = tmp_path / ("ahead" if ahead else "when_reached")
        monkeypatch.setenv("THUNDER_EXT_CACHE", "1")
        monkeypatch.setenv("THUNDER_EXT_CACHE_DIR", str(folder))
        eager, jitted = eager_and_jitted(compile_ahead=ahead)
        with torch.inference_mode():
            prefill_both(eager, jitted)
            if ahead:
                finish(ahead_of(jitted))
            decode_both(eager, jitted, range(PROMPT, 60))
        saved[ahead] = {p.relative_to(folder) for p in folder.rglob("*.entry")}
    assert len(saved[False]) == 2 + 2 * 2, saved[False]  # the prompt's chunk, the step at 16; at 32, 64: step, copy
    assert saved[False] <= saved[True], saved[False] - saved[True]


@pytest.mark.executor_sets("defaults")
def test_a_growth_waits_for_the_second_process_compiling_its_step_and_a_call_not_started_compiles_here(
    cache_on, caplog, monkeypatch, tmp_path
):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    compile_ahead, go = BucketedForward._compile_ahead, tmp_path / "go"

    def when_told(self, call):  # in the second process: compiles once the test says so
        while not go.exists():
            time.sleep(0.05)
        compile_ahead(self, call)

    monkeypatch.setattr(BucketedForward, "_compile_ahead", when_told)
    eager, jitted = eager_and_jitted()
    with torch.inference_mode():
        prefill_both(eager, jitted)
        decode_both(eager, jitted, range(PROMPT, 16))
        go.touch()
        decode_both(eager, jitted, range(16, 17))  # grows to 32, whose step the second process is compiling
        assert any(line.startswith("thunder_ext: waited") for line in ahead_lines(caplog)), ahead_lines(caplog)
        assert compiled_here(jitted) == 2
        # a prompt of a new sequence in bucket 64, the last queued: passed over, compiled here
        queued = list(ahead_of(jitted).queue)
        prompt = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(2))
        eager.set_kv_cache(batch_size=1, max_seq_length=LIMIT)
        assert_close(jitted(prompt, torch.arange(40)), eager(prompt, torch.arange(40), input_pos_maxp1=40))
    assert compiled_here(jitted) == 3
    # after the wait, the step at 64 was started; the chunks were queued
    assert [(c.capacity, c.idx.shape) for c in queued] == [(32, (1, 4)), (64, (1, 8))]
    assert not ahead_of(jitted).queue
    ahead_of(jitted).close()


@pytest.mark.executor_sets("defaults")
def test_a_wait_past_its_limit_stops_the_second_process_and_the_call_compiles_here(cache_on, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    monkeypatch.setattr(BucketedForward, "_compile_ahead", lambda self, call: time.sleep(600))  # a stuck child
    monkeypatch.setattr(growing_cache, "WAIT_FLOOR_S", 1.0)
    monkeypatch.setattr(growing_cache, "WAIT_FACTOR", 0)
    eager, jitted = eager_and_jitted()
    with torch.inference_mode():
        prefill_both(eager, jitted)
        child = ahead_of(jitted).child
        decode_both(eager, jitted, range(PROMPT, 20))  # grows to 32, whose step the stuck child holds
    assert_caches_hold_eagers(jitted, eager, 20)
    stopped = [line for line in ahead_lines(caplog) if "its limit: stopped it" in line]
    assert len(stopped) == 1 and "1 token x 1 sequence, KV cache of 32 positions" in stopped[0], ahead_lines(caplog)
    with pytest.raises(ChildProcessError):  # killed and reaped
        os.waitpid(child.pid, os.WNOHANG)
    assert ahead_of(jitted).child is None and not ahead_of(jitted).queue
    assert compiled_here(jitted) == 3  # the prompt's chunk, the steps at 16 and 32
    with torch.inference_mode():  # nothing more is queued, or forked, at a new shape
        prompt = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(2))
        jitted(prompt, torch.arange(40))
    assert ahead_of(jitted).child is None and not ahead_of(jitted).queue


@pytest.mark.executor_sets("defaults")
def test_a_second_process_that_fails_hands_nothing_back_and_each_call_compiles_when_it_comes(
    cache_on, caplog, monkeypatch
):
    caplog.set_level(logging.INFO, logger="thunder_ext")

    def fails(self, call):
        raise RuntimeError("a failure in the second process")

    monkeypatch.setattr(BucketedForward, "_compile_ahead", fails)
    eager, jitted = generated_ahead(caplog, 40)
    assert_caches_hold_eagers(jitted, eager, 40)
    failed = [line for line in ahead_lines(caplog) if "ahead failed in the second process (exit status 1)" in line]
    assert len(failed) == 4, ahead_lines(caplog)  # the step and the chunk at 32 and 64, each tried once
    assert compiled_here(jitted) == 4 and not ahead_of(jitted).handed_back  # chunk, steps at 16, 32 and 64


@pytest.mark.executor_sets("defaults")
def test_a_second_process_whose_entries_the_cache_cannot_store_stops_compiling_ahead(cache_on, caplog, monkeypatch):
    def unstorable(entry, compiled):  # as an entry naming an nvFuser region is, in the second process too
        raise NotStorable("its trace names a region the cache cannot store")

    # the module (``thunder_ext.compile_cache.attach`` is the package's function of that name)
    monkeypatch.setattr(importlib.import_module("thunder_ext.compile_cache.attach"), "programs_of", unstorable)
    _, jitted = generated_ahead(caplog, 20)
    stopped = [line for line in ahead_lines(caplog) if "saved no entry to the compile cache" in line]
    assert len(stopped) == 1 and not ahead_of(jitted).queue and not ahead_of(jitted).handed_back, ahead_lines(caplog)


@pytest.mark.executor_sets("defaults")  # nothing compiled ahead
def test_compiling_ahead_is_off_where_it_cannot_hand_back_and_says_why(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="thunder_ext")
    monkeypatch.setenv("THUNDER_EXT_CACHE", "0")
    _, jitted = eager_and_jitted()
    assert ahead_of(jitted) is None
    assert any("not ahead: the compile cache, which brings the entries back, is off" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    caplog.clear()
    _, jitted = eager_and_jitted(compile_ahead=False)
    assert ahead_of(jitted) is None and not caplog.records


@pytest.mark.executor_sets("defaults")
def test_a_new_set_kv_cache_kills_the_second_process_of_the_old_one(cache_on, monkeypatch):
    monkeypatch.setattr(BucketedForward, "_compile_ahead", lambda self, call: time.sleep(60))
    eager, jitted = eager_and_jitted()
    with torch.inference_mode():
        prefill_both(eager, jitted)
    child = ahead_of(jitted).child
    assert child is not None
    thunder_ext.set_kv_cache(jitted, batch_size=1, max_seq_length=LIMIT, min_capacity=MIN_CAPACITY)
    with pytest.raises(ChildProcessError):  # killed and reaped: no such child any more
        os.waitpid(child.pid, os.WNOHANG)
    ahead_of(jitted).close()
