#!/usr/bin/env bash
# GPU check: run tests/test_gpu.py and, when they exist, the decode and Adam benchmarks on a CUDA machine, and
# write the results into docs/ (docs/gpu_results.md, docs/benchmarks/gpu/).
#
# The GPU machine it was written for: one H100 or H200, Python 3.12 with torch 2.11 (CUDA 13) preinstalled, no
# package registry. What thunder-ext needs beyond that travels as wheels in .whl/ (git-ignored). Prepare them
# here, once, from the repository root (2.8 MB; all pure Python but optree):
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl lightning-thunder==0.2.6 litgpt==0.5.13 looseversion==1.3.0 dill==0.4.1 optree==0.20.0 \
#       jsonargparse==4.41.0 docstring-parser==0.18.0 typeshed-client==2.14.0
#
# (thunder's and litgpt's other dependencies are on that machine already. nvFuser is not among the wheels: no
# build matches torch 2.11, and the torch 2.10 one is 80 MB. An nvFuser wheel put into .whl/ is installed too,
# and the report says whether it loads.)
#
# Then run it there, from the repository root with .whl/ beside it: `bash scripts/gpu_check.sh`
# (with this workplace's device tool: carry [".whl"]; the results are also copied to $OUT when it is set).
# PYTHON picks the interpreter (default python3). The exit status is pytest's.

set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
SITE=/tmp/site
RESULTS=docs/gpu_results.md
BENCH_OUT=docs/benchmarks/gpu

# The wheels and thunder-ext itself (built from this tree with the machine's setuptools: nothing to fetch).
"$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target "$SITE" .whl/*.whl . || exit 1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# -P keeps the source folders off sys.path: they are laid out for setuptools' package-dir, the install is not.
PY=("$PYTHON" -P)

work=$(mktemp -d)
"${PY[@]}" -m pytest tests/test_gpu.py -q -rfEs -p no:cacheprovider --junitxml="$work/junit.xml" 2>&1 | tee "$work/pytest.log"
tests_status=${PIPESTATUS[0]}

if ! "${PY[@]}" -c "import thunder_ext.benchmarks" 2>/dev/null; then
    bench="not run: \`thunder_ext.benchmarks\` is not installed"
elif "${PY[@]}" -m thunder_ext.benchmarks --device cuda --cases decode,adam --out "$BENCH_OUT" >"$work/bench.log" 2>&1; then
    bench="ran: results in \`$BENCH_OUT/\`"
else
    bench="failed (exit $?); the end of its output:"$'\n\n```\n'"$(tail -n 20 "$work/bench.log")"$'\n```'
fi

BENCH="$bench" JUNIT="$work/junit.xml" "${PY[@]}" - >"$RESULTS" <<'EOF'
import datetime, importlib.metadata, os, subprocess, xml.etree.ElementTree as ET

import torch
from thunder_ext.executors import nvfuser_inplace_available

def version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"

try:
    gpu = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True,
    ).stdout.strip()
except OSError as e:
    gpu = f"no nvidia-smi ({e.strerror})"
nvfuser, why = nvfuser_inplace_available()
print(f"# GPU check, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n")
print("Written by `scripts/gpu_check.sh`; design and what each test covers: [gpu.md](gpu.md).\n")
print("| | |\n| --- | --- |")
print(f"| device | {gpu} |")
print(f"| torch | {torch.__version__} (CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}) |")
print(f"| lightning-thunder | {version('lightning-thunder')} |")
print(f"| litgpt | {version('litgpt')} |")
print(f"| nvFuser | {why if nvfuser else 'not used: ' + why} |")
print(f"| benchmarks | {os.environ['BENCH'].splitlines()[0]} |")

cases = []
try:
    cases = list(ET.parse(os.environ["JUNIT"]).getroot().iter("testcase"))
except (OSError, ET.ParseError) as e:
    print(f"\n**No test results**: {e}")

def outcome(case):
    for tag in ("failure", "error", "skipped"):
        if (element := case.find(tag)) is not None:
            message = (element.get("message") or "").splitlines()
            return tag, message[0] if message else ""
    return "passed", ""

outcomes = [(case.get("name"), *outcome(case)) for case in cases]
counts = {kind: sum(o == kind for _, o, _ in outcomes) for kind in ("passed", "failure", "error", "skipped")}
print(f"\n## tests/test_gpu.py: {counts['passed']} passed, {counts['failure']} failed, "
      f"{counts['error']} errors, {counts['skipped']} skipped\n")
if outcomes:
    print("| test | outcome | message |\n| --- | --- | --- |")
    for name, kind, message in outcomes:
        print(f"| `{name}` | {kind} | {message.replace('|', '/')[:200]} |")
if "\n" in os.environ["BENCH"]:
    print("\n## Benchmarks\n\n" + os.environ["BENCH"])
EOF

echo "wrote $RESULTS"
if [ -n "${OUT:-}" ]; then
    cp "$RESULTS" "$work/pytest.log" "$OUT"/
    [ -d "$BENCH_OUT" ] && mkdir -p "$OUT/benchmarks_gpu" && cp -r "$BENCH_OUT"/. "$OUT/benchmarks_gpu"/
fi
rm -rf "$work"
exit "$tests_status"
