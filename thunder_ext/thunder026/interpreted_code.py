"""The code thunder's interpreter runs: each code object's instructions decoded once, and the files it came from.

thunder 0.2.6's ``_run_frame`` calls ``dis.get_instructions(frame.code)`` for every frame it runs: every call of a
function, and every global and subscript it reads, which it interprets as a call of a small lambda. Decoding was
8% of the time to compile an HF decoder of 3 layers through the recipe (py-spy, 2026-11-28). Here the interpreter's
``dis`` is the standard module but for ``get_instructions`` of a code object alone, which returns the tuple it
decoded the first time for that very object (by identity: two equal code objects may differ in their lines). The
instructions are immutable named tuples, so sharing them changes nothing.

The same call names every frame the interpreter runs, so it also notes, per compilation (thunder's compile data),
the file of each: ``files_interpreted``. The compile cache depends on them all (``compile_cache/key.py``), a helper
that only returns a number included.

An exception the interpreted code raises (a ``StopIteration``, an ``AttributeError`` that ``hasattr`` catches) gets a
Python frame for its traceback: thunder's ``get_or_make_python_frame`` makes it in a new thread (so that its
``f_back`` is not the handler's) and waits for it in a loop that keeps the GIL for the switch interval, 5 ms for
each such exception: 730 of them, 5.5 of 99 s, in a profile of an HF decoder's ``generate`` through the recipe. Here
the wait blocks on a lock, which lets the thread run at once; the frame is the same.

Installed by ``adapt_thunder`` for every compilation: neither changes a trace.

Retired by: thunder caching a code object's instructions, listing the code a trace came from, and waiting on a lock.
"""

from __future__ import annotations

import _thread
import dis
import weakref
from types import CodeType, FrameType
from typing import Any

from thunder.core import interpreter
from thunder.core.compile_data import get_compile_data

_FILES: weakref.WeakKeyDictionary[object, set[str]] = weakref.WeakKeyDictionary()  # compile data -> files


def files_interpreted(cd: object) -> set[str]:
    """The files of every code object the interpreter ran for ``cd``'s compilations so far."""
    return set(_FILES.get(cd, ()))


class _DecodingOnce:
    """``dis`` as ``thunder.core.interpreter`` sees it."""

    def __init__(self) -> None:
        # id -> (the code, its instructions): keeping the code alive keeps its id its own
        self._decoded: dict[int, tuple[CodeType, tuple[dis.Instruction, ...]]] = {}
        # the compile data of the last frame (weakly: a compilation ended is not kept) and its set in ``_FILES``:
        # the frames of one compilation look it up once, not at each frame
        self._last: tuple[weakref.ref, set[str]] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(dis, name)

    def get_instructions(self, x: Any, **kwargs: Any):
        if kwargs or not isinstance(x, CodeType):
            return dis.get_instructions(x, **kwargs)
        if (cd := get_compile_data()) is not None:
            if self._last is None or self._last[0]() is not cd:
                self._last = (weakref.ref(cd), _FILES.setdefault(cd, set()))
            self._last[1].add(x.co_filename)
        if (known := self._decoded.get(id(x))) is None:
            known = self._decoded[id(x)] = (x, tuple(dis.get_instructions(x)))
        return known[1]


def _python_frame(self: interpreter.InterpreterFrame) -> FrameType:
    """thunder's ``InterpreterFrame.get_or_make_python_frame``: a frame at this frame's line, made by raising from a
    function whose code says that file, line and name, in a thread of its own; its result awaited on a lock."""
    assert self.positions is not None
    lineno = self.positions.lineno if self.positions.lineno is not None else self.code.co_firstlineno
    code = compile((lineno - self.code.co_firstlineno) * "\n" + "raise ValueError()", self.code.co_filename, "exec")
    names = {"co_filename": self.code.co_filename, "co_firstlineno": self.code.co_firstlineno,
             "co_name": self.code.co_name}  # fmt: skip
    code = code.replace(**names, **({"co_qualname": self.qualname} if hasattr(code, "co_qualname") else {}))
    made, done = [], _thread.allocate_lock()
    done.acquire()

    def make() -> None:
        def fn() -> None:
            pass

        fn.__code__ = code
        try:
            fn()
        except ValueError as e:
            tb = e.__traceback__
            while tb.tb_next is not None:
                tb = tb.tb_next
            made.append(tb.tb_frame)
        finally:
            done.release()

    _thread.start_new_thread(make, ())
    done.acquire()
    return made[0]


def install() -> None:
    if not isinstance(interpreter.dis, _DecodingOnce):
        interpreter.dis = _DecodingOnce()
    interpreter.InterpreterFrame.get_or_make_python_frame = _python_frame
