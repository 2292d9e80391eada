"""Write docs/gpu_results.md from what scripts/gpu_check.sh left in its results folder (the device tool's $OUT).

    python scripts/gpu_results.py FOLDER [--out docs/gpu_results.md]

Everything in the page comes from those files: the machine and versions (the ``ENV`` line of log.txt), each test
of tests/test_gpu.py (test_gpu.xml), thunder's KV-cache variants (thunder_suite.log), the Adam table (adam.log),
litgpt's generate (generate.jsonl), the fuzzer's tallies (fuzz.log), and how each step ended (log.txt).
"""

from __future__ import annotations

import argparse
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path


def _env(folder: Path) -> dict:
    for line in (folder / "log.txt").read_text().splitlines():
        if line.startswith("ENV "):
            return json.loads(line[4:])
    return {}


def _tests(folder: Path) -> list[str]:
    path = folder / "test_gpu.xml"
    if not path.exists():
        return ["No junit XML came back: the run ended before pytest wrote it; see test_gpu.log."]
    cases = sorted(ET.parse(path).getroot().iter("testcase"), key=lambda case: case.get("name"))
    rows, counts = [], {"passed": 0, "failure": 0, "error": 0, "skipped": 0}
    for case in cases:
        kind, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            if (element := case.find(tag)) is not None:
                kind, message = tag, (element.get("message") or "").splitlines()[0:1]
                message = message[0] if message else ""
                break
        counts[kind] += 1
        rows.append(f"| `{case.get('name')}` | {kind} | {message.replace('|', '/')[:240]} |")
    head = (f"{counts['passed']} passed, {counts['failure']} failed, {counts['error']} errors, "
            f"{counts['skipped']} skipped")  # fmt: skip
    return [head, "", "| test | outcome | message |", "| --- | --- | --- |", *rows]


def _pytest_summaries(text: str) -> list[str]:
    """The ``==`` headers the script printed and pytest's last summary line after each."""
    out = []
    for line in text.splitlines():
        if line.startswith("== "):
            out.append(f"- {line[3:]}:")
        elif re.search(r"\b(passed|failed|skipped|deselected|error|no tests ran)\b.* in [\d.]+s", line):
            out[-1:] = [f"{out[-1]} {line.strip('= ')}"] if out else [line]
    return out


def _generate(folder: Path) -> list[str]:
    path = folder / "generate.jsonl"
    if not path.exists():
        return ["No results came back."]
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows: dict[tuple, dict] = {}
    for r in records:
        rows.setdefault((r["model"], r["max_seq_length"], r["runner"]), {}).update(r)
    eager = {(m, L): r.get("per_token_ms") for (m, L, runner), r in rows.items() if runner == "eager"}
    lines = [
        "| model | max_seq_length | runner | first call s | ms per token | / eager | tokens as eager's | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (model, length, runner), r in rows.items():
        ms, base = r.get("per_token_ms"), eager.get((model, length))
        note = r.get("skipped") or r.get("error") or ("" if ms is not None else "not timed before the deadline")
        same = r.get("same_tokens_as_first_runner")
        lines.append(
            f"| {model} | {length} | {runner} | {r.get('first_call_s', '-')} | {ms if ms is not None else '-'} | "
            f"{f'{ms / base:.2f}x' if ms and base else '-'} | {'-' if same is None else ('yes' if same else 'no')} | "
            f"{note.replace('|', '/')[:300]} |"
        )
    machine = records[0]["machine"] if records else ""
    return [f"Machine: {machine}. New tokens per call: {records[0]['new_tokens'] if records else '-'}.", "", *lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/gpu_results.md"))
    args = parser.parse_args()
    folder = args.folder
    env = _env(folder)
    read = lambda name: (folder / name).read_text() if (folder / name).exists() else ""  # noqa: E731
    log = read("log.txt")
    steps = [line.split("] ", 1)[1] for line in log.splitlines() if line.startswith("[gpu_check") and "end " in line]
    # the case's table and its targets; the suite's page of every case's targets (linking pages not here) after it
    adam = [line for line in read("adam.log").split("\n| case |")[0].splitlines() if line.startswith("|")]
    page = [
        "# GPU check: results",
        "",
        f"Written by `scripts/gpu_results.py` from `{folder}`, the files `scripts/gpu_check.sh` returned; what each "
        "part covers and what it means, what earlier runs showed and what was fixed: [gpu.md](gpu.md).",
        "",
        "| | |",
        "| --- | --- |",
        *(f"| {k} | {v} |" for k, v in env.items()),
        "",
        "How each step ended (exit 124: stopped at the run's deadline):",
        "",
        *(f"- {s}" for s in steps),
        "",
        "## tests/test_gpu.py",
        "",
        *_tests(folder),
        "",
        "## thunder's litgpt KV-cache variants on CUDA",
        "",
        *_pytest_summaries(read("thunder_suite.log")),
        "",
        "## Adam step (`python -m thunder_ext.benchmarks --device cuda --cases adam --quick`)",
        "",
        *(adam or ["No table came back; see adam.log."]),
        "",
        "## litgpt's generate, bf16 (`benchmarks/cuda_generate.py`)",
        "",
        *_generate(folder),
        "",
        "## Differential fuzzer on CUDA tensors",
        "",
        "```",
        *[line for line in read("fuzz.log").splitlines() if line.startswith("==") or re.match(r"\s+\d+ ", line)],
        "```",
        "",
    ]
    args.out.write_text("\n".join(page))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
