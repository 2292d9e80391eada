#!/usr/bin/env bash
# Side by side: the final traces of scripts/trace_fingerprints.py's programs with this tree and with commit BASE's
# thunder-ext (built into a folder of its own).
#     bash scripts/trace_fingerprints_against.sh BASE
# Prints a markdown table: each case's fingerprint and first-call seconds per tree, and whether the traces are equal.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=$1
PY=${PYTHON:-.venv/bin/python}
# thunder orders some renames by set iteration, which string hashing varies from process to process
export PYTHONHASHSEED=0
SITE=/tmp/thunder-ext-at-$BASE
if [ ! -d "$SITE" ]; then
    src=$(mktemp -d) && git archive "$BASE" | tar -x -C "$src"
    "$PY" -m pip install -q --no-deps --target "$SITE" "$src"
fi
# -P: the script's folder is not put first on the path, so `import thunder_ext` is the tree's under test
HEAD_JSON=$("$PY" -P scripts/trace_fingerprints.py | tail -1)
BASE_JSON=$(PYTHONPATH="$SITE" "$PY" -P scripts/trace_fingerprints.py | tail -1)
"$PY" - "$HEAD_JSON" "$BASE_JSON" "$BASE" <<'PY'
import json, sys
head, base, name = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
print(f"| case | this tree: traces, first call (s) | {name}: traces, first call (s) | same traces |")
print("| --- | --- | --- | --- |")
for case in head:
    h, b = head[case], base[case]
    print(f"| {case} | `{h['sha256']}`, {h['first_call_s']} | `{b['sha256']}`, {b['first_call_s']} | {'yes' if h['sha256'] == b['sha256'] else 'no'} |")
PY
