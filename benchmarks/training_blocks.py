"""A training step's compile and step time with and without block programs (issue 61, item 3), by hand::

    OMP_NUM_THREADS=1 .venv/bin/python -m thunder_ext.benchmarks.training_blocks --layers 4 30

SmolLM2-135M's litgpt config cut to each depth (random weights, parameters that require grad, train mode), one
training step (forward, cross-entropy over a 64-token batch of 1, backward) per call. Runners: eager,
``thunder_ext.jit`` as it compiles by default (each layer one call of its block's program, forward and backward
compiled once), and with ``block_programs=False`` (each block's ops replayed into the model's trace, which thunder
differentiates whole). The first step (compilation included) is timed in a fresh process per runner; the steps
after it in one fresh process per depth, the runners' steps interleaved (medians of ``ROUNDS``), so that the
machine's drift falls on each alike.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch

from thunder_ext.benchmarks.compile_time import in_fresh_process

EAGER, PROGRAMS, REPLAYED = "eager", "thunder_ext.jit", "thunder_ext.jit, block programs off"
RUNNERS = (EAGER, PROGRAMS, REPLAYED)
TOKENS, ROUNDS = 64, 7


def _models(layers: int, runners: tuple[str, ...]) -> tuple[dict[str, torch.nn.Module], torch.Tensor]:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    os.environ["THUNDER_EXT_CACHE"] = "0"  # a cold compilation: no entry loaded
    from litgpt import GPT, Config

    import thunder_ext

    torch.manual_seed(0)
    gpt = GPT(Config.from_name("SmolLM2-135M", n_layer=layers)).train()
    models = {r: gpt if r == EAGER else thunder_ext.jit(copy.deepcopy(gpt), block_programs=r == PROGRAMS)
              for r in runners}  # fmt: skip
    ids = torch.randint(0, gpt.config.padded_vocab_size, (1, TOKENS), generator=torch.Generator().manual_seed(0))
    return models, ids


def _step(model: torch.nn.Module, ids: torch.Tensor) -> float:
    start = time.perf_counter()
    logits = model(ids)
    torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
    return time.perf_counter() - start


def first_step(layers: int, runner: str) -> float:
    models, ids = _models(layers, (runner,))
    return _step(models[runner], ids)


def steps(layers: int) -> dict[str, float]:
    models, ids = _models(layers, RUNNERS)
    for model in models.values():  # compiled, and warm
        _step(model, ids)
        _step(model, ids)
    seconds = {r: [] for r in RUNNERS}
    for _ in range(ROUNDS):
        for r, model in models.items():
            seconds[r].append(_step(model, ids))
    return {r: statistics.median(s) for r, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 30])
    args = parser.parse_args()
    print("| layers | runner | first step (s) | step (s) |\n|---|---|---|---|")
    for layers in args.layers:
        first = {r: in_fresh_process(first_step, layers, r) for r in RUNNERS}
        steady = in_fresh_process(steps, layers)
        for r in RUNNERS:
            print(f"| {layers} | {r} | {first[r]:.2f} | {steady[r]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
