"""Which views of a graph's intermediate plain torch.compile returns as a tensor of its own, under ``no_grad``.

    python scripts/probe_inductor_view_outputs.py   # a table: each layout of the intermediate, the chains returned apart
    python scripts/probe_inductor_view_outputs.py --device cuda --layout "a * 1.5"   # one row, on CUDA

A graph ``r = layout(a); return r, chain(r)`` is compiled for each of six layouts of ``r`` and each chain of one or
two of ten views; a chain counts where eager returns it as a view of ``r`` and torch.compile's result shares no
storage with its ``r``. ``transforms/view_writes.py``'s ``_returned_apart_by_inductor`` rests on this table: a write
after the graph through such a chain would miss ``r``. torch 2.9.1 on the CPU (docs/design.md records the result);
on CUDA (Triton) the GPU check runs a row per process (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import warnings
from collections.abc import Callable

import torch

LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "a * 1.5": lambda a: a * 1.5,
    "a.transpose(0, 2) * 1.5": lambda a: a.transpose(0, 2) * 1.5,
    "a.diagonal() * 1.5": lambda a: a.diagonal(0, 0, 1) * 1.5,
    "a.permute(1, 2, 0) * 1.5": lambda a: a.permute(1, 2, 0) * 1.5,
    "a[:, ::2] * 1.5": lambda a: a[:, ::2] * 1.5,
    "a.sum(0) * 1.5": lambda a: a.sum(0) * 1.5,
}
VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "[1:]": lambda r: r[1:],
    "[0]": lambda r: r[0] if r.dim() > 1 else r[0:1],
    ".transpose(0, -1)": lambda r: r.transpose(0, -1),
    ".unsqueeze(0)": lambda r: r.unsqueeze(0),
    ".unsqueeze(1).squeeze(1)": lambda r: r.unsqueeze(1).squeeze(1),
    ".view(-1)": lambda r: r.view(-1) if r.is_contiguous() else r.reshape(-1),
    ".diagonal()": lambda r: r.diagonal() if r.dim() > 1 else r[::2],
    ".unfold(0, 1, 1)": lambda r: r.unfold(0, 1, 1),
    ".narrow(-1, 0, 1)": lambda r: r.narrow(-1, 0, 1),
    "[::2]": lambda r: r[::2],
}


def shares_storage(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def returned_apart(layout: Callable, chain: tuple[str, ...], device: str) -> bool | None:
    """Whether torch.compile returns ``chain`` of ``layout(a)`` apart from it; None where eager makes no view."""

    def graph(a):
        r = layout(a)
        v = r
        for name in chain:
            v = VIEWS[name](v)
        return r, v

    a = torch.randn(4, 4, 2, device=device)
    if not shares_storage(*graph(a)):
        return None  # a copy in eager too (``reshape`` of a strided tensor)
    torch._dynamo.reset()
    with torch.no_grad():
        return not shares_storage(*torch.compile(graph)(a))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layout", action="append", choices=LAYOUTS, help="only these rows (all by default)")
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch._logging.set_logs(dynamo=logging.CRITICAL, inductor=logging.CRITICAL)
    tried = 0
    print(
        f"torch {torch.__version__}, {options.device}\n\n| intermediate `r` | chains returned apart from `r` |\n|---|---|"
    )
    for name in options.layout or LAYOUTS:
        layout, apart = LAYOUTS[name], []
        for n in (1, 2):
            for chain in itertools.product(VIEWS, repeat=n):
                outcome = returned_apart(layout, chain, options.device)
                tried += outcome is not None
                if outcome:
                    apart.append("`r" + "".join(chain) + "`")
        print(f"| `{name}` | {', '.join(apart) or 'none'} |")
    print(f"\n{tried} chains that eager returns as views of `r`.")


if __name__ == "__main__":
    main()
