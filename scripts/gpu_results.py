"""Write docs/gpu_results.md from what scripts/gpu_check.sh left in its results folder (the device tool's $OUT).

    python scripts/gpu_results.py FOLDER [FOLDER ...] [--out docs/gpu_results.md]   (newest run first)

Everything in the page comes from those files, one part per run: the machine and versions (the ``ENV`` line of
log.txt), the probe's findings (its ``PROBE`` lines), each test of tests/test_gpu.py (test_gpu.xml), thunder's
KV-cache variants (thunder_suite.log), the Adam table (adam.log) or profile (adam_profile.log), SmolLM2's first
prefill profiled (compile_profile.log), litgpt's generate (generate.jsonl), the fuzzer's tallies (fuzz.log), the views
Inductor returns apart (inductor_views.log), the replayed programs (replay.log), and how each step ended (log.txt).
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
        log = folder / "test_gpu.log"
        marks = "".join(
            line.split(" [")[0]
            for line in (log.read_text().splitlines() if log.exists() else ())
            if re.fullmatch(r"[.FEsxX]+( +\[ *\d+%\])?", line.strip())
        )
        seen = (
            f" Its progress marks: {marks.count('.')} passed, {marks.count('F')} failed, {marks.count('E')} errors, "
            f"{marks.count('s')} skipped (pytest -q names no test before its summary)."
            if marks
            else ""
        )
        failed = sorted(
            {m.group(2) for m in re.finditer(r"\] (FAILED|ERROR) (\S+)", log.read_text() if log.exists() else "")}
        )
        return [f"No junit XML came back: the run ended before pytest wrote it; see test_gpu.log.{seen}",
                *([""] + [f"- failed: `{name}`" for name in failed] if failed else [])]  # fmt: skip
    # a case pytest-xdist could not name (run 7 wrote one) sorts first, named as such
    cases = sorted(ET.parse(path).getroot().iter("testcase"), key=lambda case: case.get("name") or "")
    rows, counts = [], {"passed": 0, "failure": 0, "error": 0, "skipped": 0}
    for case in cases:
        kind, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            if (element := case.find(tag)) is not None:
                kind, message = tag, (element.get("message") or "").splitlines()[0:1]
                message = message[0] if message else ""
                break
        counts[kind] += 1
        rows.append(f"| `{case.get('name') or '(unnamed in the junit XML)'}` | {kind} | {message.replace('|', '/')[:240]} |")
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
        if (agree := r.get("tokens_as_first_runners_before_the_first_other")) is not None and agree < r["new_tokens"]:
            note = f"first call: its first {agree} tokens as eager's. {note}".strip()
        same = r.get("same_tokens_as_first_runner")
        lines.append(
            f"| {model} | {length} | {runner} | {r.get('first_call_s', '-')} | {ms if ms is not None else '-'} | "
            f"{f'{ms / base:.2f}x' if ms and base else '-'} | {'-' if same is None else ('yes' if same else 'no')} | "
            f"{note.replace('|', '/')[:300]} |"
        )
    machine = records[0]["machine"] if records else ""
    return [f"Machine: {machine}. New tokens per call: {records[0]['new_tokens'] if records else '-'}.", "", *lines]


def _probe(log: str) -> list[str]:
    return [f"- {line[len('PROBE ') :]}" for line in log.splitlines() if line.startswith("PROBE ")]


def _adam_profile(text: str) -> list[str]:
    records = [
        json.loads(line[len("ADAM_PROFILE ") :]) for line in text.splitlines() if line.startswith("ADAM_PROFILE ")
    ]
    if not records:
        return []
    lines = [
        (
            "| runner | first call s | ms per step | host ms in thunder's computation | kernels | kernel ms | "
            "top host ops (name, calls, ms) |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['runner']} | - | - | - | - | - | {r['error'].replace('|', '/')[:200]} |")
            continue
        ops = "; ".join(f"{name[:60]} ({n}, {ms})" for name, n, ms in r["top_host_ops"][:4]).replace("|", "/")
        lines.append(
            f"| {r['runner']} | {r['first_call_s']} | {r['step_ms']} | {r['computation_host_ms'] or '-'} | "
            f"{r['kernels']} | {r['kernel_ms']} | {ops} |"
        )
    return [
        f"{records[0].get('params', '?')} parameters of {records[0].get('numel', '?')} elements, float32:",
        "",
        *lines,
    ]


def _compile_profile(text: str, top: int = 12) -> list[str]:
    """The compilation's log lines, then cProfile's functions with the most time of their own."""
    if not text:
        return []
    lines = text.splitlines()
    said = [f"- {line}" for line in lines if line.startswith(("thunder_ext: traced", "thunder_ext: compiled", "first"))]
    own = lines[lines.index("== by tottime") + 1 :] if "== by tottime" in lines else []
    rows = []
    for line in own:  # ncalls tottime percall cumtime [percall] function: a recursive generator's last percall is blank
        if re.match(r"\s*[\d/]+\s+\d", line) and len(rows) < top:
            calls, own_s, _, cumulative, rest = line.split(None, 4)
            function = re.sub(r"^[\d.]+ +", "", rest)[-90:]
            rows.append(f"| {calls} | {own_s} | {cumulative} | `{function}` |")
    return [*said, "", "| calls | own s | cumulative s | function |", "| --- | --- | --- | --- |", *rows]


def run_section(folder: Path) -> list[str]:
    """The page's part for one run: what its files hold (a part a run did not return is left out)."""
    read = lambda name: (folder / name).read_text() if (folder / name).exists() else ""
    log = read("log.txt")
    env = _env(folder)
    steps = [line.split("] ", 1)[1] for line in log.splitlines() if line.startswith("[gpu_check") and "end " in line]
    steps += [
        line for line in log.splitlines() if re.match(r"\w+ exit \d+", line)
    ]  # a run by hand: "tests exit 0 at 90s"
    # the case's table and its targets; the suite's page of every case's targets (linking pages not here) after it
    adam = [line for line in read("adam.log").split("\n| case |")[0].splitlines() if line.startswith("|")]
    parts = [
        f"## Run `{folder}`",
        "",
        *(["| | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in env.items()), ""] if env else []),
        "How each step ended (exit 124: stopped at the run's deadline; 137: killed at it):",
        "",
        *(f"- {s}" for s in steps),
        "",
    ]
    if probe := _probe(log):
        parts += ["### Probe (`scripts/gpu_probe.py`)", "", *probe, ""]
    parts += ["### tests/test_gpu.py", "", *_tests(folder), ""]
    if summaries := _pytest_summaries(read("thunder_suite.log")):
        parts += ["### thunder's litgpt KV-cache variants on CUDA", "", *summaries, ""]
    if adam:
        parts += [
            "### Adam step (`python -m thunder_ext.benchmarks --device cuda --cases adam --quick`)",
            "",
            *adam,
            "",
        ]
    if profile := _adam_profile(read("adam_profile.log")):
        parts += ["### Where an Adam step's time goes (`scripts/gpu_adam_profile.py`)", "", *profile, ""]
    if profile := _compile_profile(read("compile_profile.log")):
        parts += ["### SmolLM2-135M's first prefill, profiled (`scripts/gpu_compile_profile.py`)", "", *profile, ""]
    if (folder / "generate.jsonl").exists():
        parts += ["### litgpt's generate, bf16 (`benchmarks/cuda_generate.py`)", "", *_generate(folder), ""]
    if replay := [line[:300] for line in read("replay.log").splitlines() if line.startswith("==")]:
        parts += ["### Saved programs replayed (`scripts/replay_on_device.py`; traces in replay.log)", "", "```",
                  *replay, "```", ""]  # fmt: skip
    if rows := [line for line in read("inductor_views.log").splitlines() if line.startswith("| `")]:
        parts += ["### Views of a graph's intermediate Inductor returns apart (`scripts/probe_inductor_view_outputs.py`)",
                  "", "| intermediate `r` | chains returned apart from `r` |", "|---|---|", *rows, ""]  # fmt: skip
    if fuzz := [line for line in read("fuzz.log").splitlines() if line.startswith("==") or re.match(r"\s+\d+ ", line)]:
        parts += ["### Differential fuzzer on CUDA tensors", "", "```", *fuzz, "```", ""]
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", type=Path, nargs="+", help="results folders, newest first")
    parser.add_argument("--out", type=Path, default=Path("docs/gpu_results.md"))
    args = parser.parse_args()
    page = [
        "# GPU check: results",
        "",
        (
            "Written by `scripts/gpu_results.py` from the files `scripts/gpu_check.sh` returned, newest run first; "
            "what each part covers and what it means, what earlier runs showed and what was fixed: [gpu.md](gpu.md)."
        ),
        "",
    ]
    for folder in args.folders:
        page += run_section(folder)
    args.out.write_text("\n".join(page))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
