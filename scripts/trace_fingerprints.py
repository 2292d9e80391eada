"""The final traces the `decode` and `requires_grad` benchmarks' programs compile to, as one SHA-256 each.

    PYTHONHASHSEED=0 python -P scripts/trace_fingerprints.py   # one JSON line: case -> {"sha256", "first_call_s"}

Equal fingerprints under two trees mean the same program runs (every op, name and executor of the forward and
backward execution traces), so the same time per call, given one ``PYTHONHASHSEED`` (thunder orders some renames by
set iteration): a check of "no cost where a change does not apply" that
machine noise cannot blur. `scripts/trace_fingerprints_against.sh BASE` compares this tree with commit BASE's.
The last case writes through a view taken before a write of an argument (issue 40's class), a control that
differs where the extension's handling of it changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable

os.environ.setdefault("THUNDER_EXT_CACHE", "0")  # compile here: a trace from the cache on disk is no measure

import thunder
import torch
from thunder.executors.torch_compile import torch_compile_ex

import thunder_ext
from thunder_ext.tools.demo_model import small_model


def _fingerprint(jitted: Callable, call: Callable[[], object]) -> dict:
    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    traces = [thunder.last_traces(jitted)[-1], *thunder.last_backward_traces(jitted)[-1:]]
    text = re.sub(r"\(took \d+ milliseconds\)", "", "\n".join(str(t) for t in traces))  # a pass's time, in a header
    return {"sha256": hashlib.sha256(text.encode()).hexdigest()[:16], "first_call_s": round(first, 2)}


def decode(executors: list | None) -> dict:
    torch.manual_seed(0)
    model = small_model(64)  # as constructed: its parameters require grad
    model.set_kv_cache(batch_size=1)
    jitted = thunder_ext.jit(model, **({"executors": executors} if executors else {}))
    with torch.inference_mode():
        jitted(torch.randint(0, 100, (1, 8)), torch.arange(8))
    with torch.inference_mode():
        return _fingerprint(jitted, lambda: jitted(torch.tensor([[7]]), torch.tensor([8])))


def adam(foreach: bool) -> dict:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(64)) for _ in range(4)]
    for p in params:
        p.grad = torch.randn_like(p)
    step = thunder_ext.jit(torch.optim.Adam(params, lr=1e-3, foreach=foreach).step)
    return _fingerprint(step, step)


def train() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 14 * 14, 10),
    ).train()
    jitted, x = thunder_ext.jit(model), torch.randn(4, 3, 16, 16)
    return _fingerprint(jitted, lambda: jitted(x).square().mean().backward())


def control() -> dict:
    def program(buf, a):
        v = buf.unsqueeze(1)
        buf.index_copy_(0, torch.tensor([2, 0]), a * 2)
        return v * 3

    jitted, a = thunder_ext.jit(program), torch.randn(2, requires_grad=True)
    try:
        return _fingerprint(jitted, lambda: jitted(torch.randn(3), a).sum().backward())
    except Exception as error:  # noqa: BLE001  (a tree where this program fails: its error is its fingerprint)
        return {"sha256": type(error).__name__, "first_call_s": None}


CASES = {
    "decode, thunder's defaults": lambda: decode(None),
    "decode, torch.compile executor": lambda: decode([torch_compile_ex, *thunder.get_default_executors()]),
    "Adam, foreach=False": lambda: adam(False),
    "Adam, foreach=True": lambda: adam(True),
    "train step, BatchNorm": train,
    "control: a view taken before a differentiated write of an argument": control,
}

if __name__ == "__main__":
    print(json.dumps({name: case() for name, case in CASES.items()}))
