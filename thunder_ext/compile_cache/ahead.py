"""Compilations made ahead of their first call, in a forked process, and handed back through the compile cache.

A call that will come later (``set_kv_cache``'s one-token call at each larger bucket) is compiled by a child forked
from this process: it holds this process's state as it was (the module, its options, thunder's), makes the call
there, which compiles it and saves the entry to the compile cache, and exits. This process then loads the entry
(``load_new``), as a later process would: its prologue accepts a call, or thunder tries its other entries and
compiles, so an entry runs only for a call it was compiled for. The rules, each with its test in
``tests/test_compile_ahead.py``:

1. **One child at a time**, compiling the targets in the order they were added, each once.
2. **A call waits for the child compiling its target** (the child started first, so it ends first); the targets
   queued before it are passed over, and one not started yet is dropped: that call compiles it here. **The wait is
   bounded** by the caller's limit: a child still running then is killed, its call compiles here, and nothing more
   is compiled ahead (a child that outlives any compilation's time is stuck, and the next one would be too).
3. **A child that fails hands nothing back**: the log says so, and its target compiles when its call comes. A
   child that compiled but handed nothing back (the cache stores no entry naming an nvFuser region) stops the
   compiling ahead: the others would hand back nothing either.
4. **Only where forking is sound**: Linux, no other Python thread, no CUDA context in this process (a forked child
   cannot use one), and the compile cache on for every function the child compiles (the entries come back through
   it). The threads are checked again at each fork: one started since stops the compiling ahead, said so. The calls
   its owner makes here start none (``forkable``): Inductor, the torch.compile executor's, would otherwise compile
   their kernels on a pool of threads it keeps, whose queue a child waits on forever, and torch's FX interpreter
   opens a (disabled) tqdm bar, whose class starts a monitor thread that runs until the process ends.
5. **The child is quiet**: its stdout and stderr go to ``/dev/null`` and its logging is off, it runs torch on one
   thread at a lower priority (``nice`` 10), and it is killed when its owner is closed or collected, or when this
   process exits.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import thunder
import torch
from torch._inductor import config as inductor_config

try:
    from tqdm import tqdm  # torch's progress bars, when it is installed
except ImportError:
    tqdm = None

from thunder_ext.compile_cache.attach import cache_loads, cached, load_new

log = logging.getLogger("thunder_ext")

# a child's exit status where its call compiled nothing: an entry this process had (loaded or compiled) ran it
_NOTHING_COMPILED = 3


def _compilations(compiled: Sequence[Callable]) -> list[int]:
    """How many times each function compiled here: thunder's misses, less the entries loaded (counted as misses)."""
    return [thunder.cache_misses(f) - cache_loads(f) for f in compiled]


def _other_threads() -> str:
    """The names of the Python threads running beside this one, or an empty string."""
    return ", ".join(t.name for t in threading.enumerate() if t is not threading.current_thread())


def unavailable(compiled: Sequence[Callable]) -> str | None:
    """Why the functions ``compiled`` cannot be compiled ahead here (rule 4), or None."""
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return f"forking a process is not sound on {sys.platform}"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return "this kernel cannot wait for a process with a limit (pidfd_open: Linux 5.3 and later)"
    if threads := _other_threads():  # a child would find their locks held, forever (a pytest-xdist worker's)
        return f"other Python threads run in this process ({threads}), whose locks a forked process could find held"
    if torch.cuda.is_initialized():
        return "this process holds a CUDA context, which a forked process cannot use"
    if not all(cached(f) for f in compiled):
        return "the compile cache, which brings the entries back, is off (THUNDER_EXT_CACHE or compile_cache=False)"
    return None


@dataclass
class _Child:
    pid: int
    target: Hashable
    start: float


class CompileAhead:
    """Targets compiled ahead by forked children, one at a time (the module's rules).

    ``compile(target)`` runs in the child and makes the call of ``target`` (compiling it); ``compiled`` are the
    thunder-compiled functions whose entries it saves; ``described(target)`` names a target in the log.
    """

    def __init__(self, compile: Callable[[Hashable], None], compiled: Sequence[Callable],
                 described: Callable[[Hashable], str]) -> None:  # fmt: skip
        self._compile, self._compiled, self._described = compile, compiled, described
        self.queue: list[Hashable] = []
        self.added: set[Hashable] = set()
        self.child: _Child | None = None
        self.handed_back: list[Hashable] = []  # the targets whose children ended well, in order
        self.closed = False
        self._stop: weakref.finalize | None = None

    def add(self, targets: Sequence[Hashable]) -> None:
        """Queues each target not added before, and starts a child if none runs."""
        if self.closed:
            return
        for target in targets:
            if target not in self.added:
                self.added.add(target)
                self.queue.append(target)
        self.poll()

    def poll(self) -> None:
        """Takes back what an ended child compiled, and starts the next."""
        if self.child is not None:
            pid, status, usage = os.wait4(self.child.pid, os.WNOHANG)
            if pid == 0:
                return
            self._ended(status, usage)
        if self.queue and (threads := _other_threads()):  # rule 4, at each fork
            log.info("thunder_ext: no more is compiled ahead: other Python threads run in this process (%s), whose "
                     "locks a forked process could find held", threads)  # fmt: skip
            self.close()
        elif self.queue:
            self._fork(self.queue.pop(0))

    def wait_for(self, target: Hashable, limit: float) -> None:
        """Before a call of ``target``: waits at most ``limit`` seconds for the child compiling it (and takes its
        entries back), passes over the targets queued before it, and drops it if no child has started it (rule 2)."""
        if target in self.queue:
            del self.queue[: self.queue.index(target) + 1]
        elif self.child is not None and self.child.target == target:
            start = time.perf_counter()
            ended = _wait(self.child.pid, limit)
            waited = time.perf_counter() - start
            if ended is None:
                log.warning("thunder_ext: waited %.1f s for the second process compiling %s, its limit: stopped it; "
                            "the call compiles here, and no more is compiled ahead", waited, self._described(target))  # fmt: skip
                self.close()
                return
            log.info("thunder_ext: waited %.1f s for the second process compiling %s", waited, self._described(target))
            self._ended(*ended)
        self.poll()

    @contextmanager
    def forkable(self) -> Iterator[None]:
        """This process's compilations within start no thread (rule 4): Inductor's kernels compile one after another
        here, not on its pool, and tqdm's bars start no monitor. Each library's own switch: Inductor's
        ``compile_threads`` and tqdm's documented ``monitor_interval = 0``."""
        if self.closed:
            yield
            return
        interval = tqdm.monitor_interval if tqdm is not None else None
        try:
            if tqdm is not None:
                tqdm.monitor_interval = 0
            with inductor_config.patch(compile_threads=1):
                yield
        finally:
            if tqdm is not None:
                tqdm.monitor_interval = interval

    def close(self) -> None:
        """Kills the running child, if any, and compiles nothing more."""
        self.closed = True
        self.queue.clear()
        if self._stop is not None:
            self._stop()
        self.child = None

    def _fork(self, target: Hashable) -> None:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _quiet()
                before = _compilations(self._compiled)
                self._compile(target)
                code = 0 if _compilations(self._compiled) != before else _NOTHING_COMPILED
            finally:
                os._exit(code)  # no atexit handler, no finalizer: the parent's resources are the parent's
        self.child = _Child(pid, target, time.perf_counter())
        self._stop = weakref.finalize(self, _kill, pid)

    def _ended(self, status: int, usage: object) -> None:
        child, self.child = self.child, None
        self._stop.detach()
        seconds, cpu = time.perf_counter() - child.start, usage.ru_utime + usage.ru_stime
        if os.waitstatus_to_exitcode(status) == _NOTHING_COMPILED:
            log.info("thunder_ext: %s needs no compiling ahead: this process has it already (loaded from the "
                     "compile cache, or compiled here); no more is compiled ahead", self._described(child.target))
            self.close()
            return
        if os.waitstatus_to_exitcode(status) != 0:
            log.warning("thunder_ext: compiling %s ahead failed in the second process (exit status %d): it compiles "
                        "when its call comes", self._described(child.target), os.waitstatus_to_exitcode(status))  # fmt: skip
            return
        loaded = sum(load_new(f) for f in self._compiled)
        if loaded == 0:
            log.info("thunder_ext: compiled %s ahead in a second process, which saved no entry to the compile cache "
                     "(one naming an nvFuser region, say, is not stored): no more is compiled ahead",
                     self._described(child.target))  # fmt: skip
            self.close()
            return
        self.handed_back.append(child.target)
        log.info("thunder_ext: compiled %s ahead in a second process (%.1f s, %.1f s of CPU): %d entries loaded",
                 self._described(child.target), seconds, cpu, loaded)  # fmt: skip


def _wait(pid: int, limit: float) -> tuple[int, object] | None:
    """The exit status and resource usage of child ``pid`` once it ends, or None if it runs ``limit`` seconds more."""
    fd = os.pidfd_open(pid)  # readable once the process ends
    try:
        if not select.select([fd], [], [], limit)[0]:
            return None
    finally:
        os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    return status, usage


def _quiet() -> None:
    """The child's output off (rule 5): it shares this process's terminal and log files."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    logging.disable(logging.CRITICAL)
    torch.set_num_threads(1)
    os.nice(10)  # where the cores are busy, the generating process goes first


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
