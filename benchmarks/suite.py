"""Run the benchmark suite and write its tables, plots and targets: a full run into docs/benchmarks/, a
--quick one into a new temporary folder unless --out names one.

Cases run config by config under one progress bar, which names the runner compiling or being timed;
then each case's table (and plot) is written, and
``targets.md``: every number the suite is asked to meet, as measured, met or not. A run of some cases
updates their rows only: ``targets.json`` keeps each case's targets with the run that measured them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from datetime import date
from pathlib import Path

import torch

from thunder_ext.benchmarks import (
    adam,
    compile_ahead,
    compile_scaling,
    compile_time,
    decode,
    entry_points,
    generate,
    generate_session,
    guard_cost,
    hf_generate,
    kv_cache_write,
    kv_idioms,
    moe_decode,
    prefill,
    requires_grad,
    warm_start,
)
from thunder_ext.benchmarks.measure import machine, report_status
from thunder_ext.benchmarks.report import Table, Target
from thunder_ext.tools.extras import require
from thunder_ext_cli import BENCH_DOCS, bench_parser

CASES = {
    "kv_write": kv_cache_write,
    "decode": decode,
    "generate": generate,
    "generate_session": generate_session,
    "hf_generate": hf_generate,
    "prefill": prefill,
    "adam": adam,
    "compile": compile_time,
    "compile_ahead": compile_ahead,
    "compile_scaling": compile_scaling,
    "kv_idioms": kv_idioms,
    "requires_grad": requires_grad,
    "entry_points": entry_points,
    "warm_start": warm_start,
    "guard_cost": guard_cost,
    "moe_decode": moe_decode,
}


def parse(argv: Sequence[str] | None, prog: str = "thunder-ext bench") -> argparse.Namespace:
    parser = bench_parser(prog, CASES)  # --cases: a list of names, each a case of CASES
    args = parser.parse_args(argv)
    if args.out is None:  # a smoke run never touches the recorded results unless asked to
        args.out = Path(tempfile.mkdtemp(prefix="thunder-ext-bench-")) if args.quick else BENCH_DOCS
    args.device = torch.device(args.device)
    if args.device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine")
    return args


def record_targets(folder: Path, tables: list[Table], run: str) -> dict[str, dict]:
    """Merge this run's targets into ``folder/targets.json`` (case -> run and targets) and return the record."""
    path = folder / "targets.json"
    record = json.loads(path.read_text()) if path.exists() else {}
    for table in tables:
        record[table.name] = {"run": run, "targets": [asdict(t) for t in table.targets]}
    path.write_text(json.dumps(record, indent=1) + "\n")
    return record


def targets_page(record: dict[str, dict]) -> str:
    runs = list(dict.fromkeys(entry["run"] for entry in record.values()))
    lines = [
        "# Benchmark targets",
        "",
        "Each case as its latest run measured it; the runs are listed below the table.",
        "",
        "| case | target | measured | met | run |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, entry in record.items():
        for t in entry["targets"]:
            lines.append(f"| [{name}]({name}.md) | {Target(**t).cells()} | {runs.index(entry['run']) + 1} |")
    lines += ["", *(f"{i}. {run}" for i, run in enumerate(runs, 1))]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None, prog: str = "thunder-ext bench") -> None:
    args = parse(argv, prog)
    require("thunder-ext bench")
    with _settings_of_the_run(args.threads):
        _run(args, argv, prog)


@contextlib.contextmanager
def _settings_of_the_run(threads: int) -> Iterator[None]:
    """torch's ``threads``, and the compile cache off: every case measures compilations as a process without it
    makes them (fresh processes inherit this; warm_start fills and reads caches of its own). The process's
    environment and threads are restored after, for a caller that goes on (a test, a notebook): a test after a
    run in its process found the cache off (2026-12-01)."""
    env, threads_before = dict(os.environ), torch.get_num_threads()
    torch.set_num_threads(threads)
    os.environ["THUNDER_EXT_CACHE"] = "0"
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(env)
        torch.set_num_threads(threads_before)


def _run(args: argparse.Namespace, argv: Sequence[str] | None, prog: str) -> None:
    from tqdm import tqdm  # after the check that it is installed

    start = time.perf_counter()
    where = machine(args.device)
    configs = {name: CASES[name].configs(args.quick) for name in args.cases}
    units = [(name, config) for name in args.cases for config in configs[name]]
    results: dict[str, dict] = {name: {} for name in args.cases}
    tables = []
    print(f"writing into {args.out}/", flush=True)
    with tqdm(units, unit="config") as bar, report_status(bar.set_postfix_str):
        for name, config in bar:
            bar.set_description(f"{name} {config}")
            results[name][config] = CASES[name].measure(config, args.device, args.quick)
            if len(results[name]) == len(configs[name]):  # the case is done: write it now
                tables.append(CASES[name].report(results[name]))
                written = ", ".join(str(p) for p in tables[-1].write(args.out, where))
                bar.write(f"{tables[-1].markdown(where)}\nwrote {written}\n")
    command = (f"{prog} " + " ".join(sys.argv[1:] if argv is None else argv)).strip()
    minutes = (time.perf_counter() - start) / 60
    run = f"`{command}` on {where}, {date.today().isoformat()} ({minutes:.1f} minutes)"
    page = targets_page(record_targets(args.out, tables, run))
    (args.out / "targets.md").write_text(page)
    print(page)
