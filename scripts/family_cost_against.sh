#!/usr/bin/env bash
# Side by side: what each model of scripts/family_cost.py costs with this tree and with commit BASE's thunder-ext
# (built into a folder of its own), the two taking turns process by process, ROUNDS rounds (default 3).
#     bash scripts/family_cost_against.sh BASE [MODEL ...]      (default models: litgpt hf-thunderfx hf-recipe)
# Prints one JSON line per process (its tree named) and, last, each model's best first-call seconds and ms per token
# per tree with their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=$1; shift
MODELS=("${@:-litgpt hf-thunderfx hf-recipe}")
read -ra MODELS <<<"${MODELS[*]}"
PY=${PYTHON:-.venv/bin/python}
SITE=/tmp/thunder-ext-at-$BASE
if [ ! -d "$SITE" ]; then
    src=$(mktemp -d) && git archive "$BASE" | tar -x -C "$src"
    "$PY" -m pip install -q --no-deps --target "$SITE" "$src"
fi
OUT=$(mktemp)
for round in $(seq "${ROUNDS:-3}"); do
    for model in "${MODELS[@]}"; do
        # -P: the script's folder is not put first on the path, so `import thunder_ext` is the tree's under test
        "$PY" -P scripts/family_cost.py "$model" | sed "s/^{/{\"tree\": \"HEAD\", /" | tee -a "$OUT"
        PYTHONPATH="$SITE" "$PY" -P scripts/family_cost.py "$model" | sed "s/^{/{\"tree\": \"$BASE\", /" | tee -a "$OUT"
    done
done
"$PY" - "$OUT" "$BASE" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(f"| model | tree | first call (s) | ms per token | ratio to {sys.argv[2]} |")
print("| --- | --- | --- | --- | --- |")
for model in dict.fromkeys(r["model"] for r in rows):
    best = {t: (min(r["first_call_s"] for r in rows if r["model"] == model and r["tree"] == t),
                min(r["ms_per_token"] for r in rows if r["model"] == model and r["tree"] == t))
            for t in ("HEAD", sys.argv[2])}
    for t, (first, per_token) in best.items():
        base_first, base_token = best[sys.argv[2]]
        print(f"| {model} | {t} | {first:.2f} | {per_token:.3f} | {first / base_first:.3f}, {per_token / base_token:.3f} |")
PY
