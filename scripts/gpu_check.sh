#!/usr/bin/env bash
# GPU check (docs/gpu.md): everything the CUDA machine should show, in one call of limited time. Side by side,
# each under the same deadline:
#   - first, scripts/gpu_probe.py (how nvFuser writes an alias output into a transposed or sliced input), into log.txt;
#   - tests/test_gpu.py, with nvFuser where it loads and with the PyTorch executor, under both executor sets, and
#     the fuzzer's programs found on CUDA (test_regression_on_cuda);
#   - thunder's own litgpt KV-cache variants on CUDA, with --thunder-ext;
#   - where an Adam step's time goes (scripts/gpu_adam_profile.py: eager, thunder.jit, thunder_ext.jit);
#   - litgpt's generate, bf16 (benchmarks/cuda_generate.py): SmolLM2-135M's config (30 layers) and the demo model
#     at max_seq_length 2048, eager against the growing cache (the demo also under thunder's CUDA graphs);
#   - the differential fuzzer on CUDA tensors (nvFuser regions), seeded, niced, until the deadline: without grad,
#     and with inputs that require grad.
# Benchmark processes time one at a time (THUNDER_EXT_TIMING_LOCK); the others may compile meanwhile.
# What comes back is raw (logs, junit XML, JSON lines); scripts/gpu_results.py turns it into docs/gpu_results.md.
#
# The GPU machine: one H100 or H200, Python 3.12, torch 2.11 (cu130), no package registry. Build the kit here
# first (`bash scripts/gpu_kit.sh`: thunder, litgpt, nvFuser, transformers; git-ignored), then run there, carrying
# ".gpu-kit":  bash scripts/gpu_check.sh
# GPU_CHECK_BUDGET (seconds, default 480) bounds the whole run; results go to $OUT (else /tmp/gpu-check).
# GPU_CHECK_STEPS picks steps (default "probe tests thunder-suite adam generate fuzz"; also "compile-profile":
# scripts/gpu_compile_profile.py; "inductor-views": scripts/probe_inductor_view_outputs.py on this device; "replay":
# scripts/replay_on_device.py on the saved programs GPU_CHECK_REPLAY names, every CUDA one by default);
# GPU_CHECK_WORKERS the test step's pytest workers (4); GPU_CHECK_K a -k expression choosing its tests (all by
# default); GPU_CHECK_GENERATE the generate runs, "MODEL LENGTH RUNNERS" separated by ";"; GPU_CHECK_FUZZ the fuzz
# runs, "EXECUTOR_SET SEED grad|no-grad" separated by ";" (default "defaults 1 no-grad;defaults 3 grad").
# For a dry run on a CPU machine: GPU_CHECK_DEVICE=cpu GPU_CHECK_PYTHON=.venv/bin/python (no kit, no install).

set -u
cd "$(dirname "$0")/.."
START=$(date +%s)
DEADLINE=$((START + ${GPU_CHECK_BUDGET:-480}))
touch /tmp/gpu-check-start  # failing fuzz programs are the files saved after it
DEVICE=${GPU_CHECK_DEVICE:-cuda}
R=${OUT:-/tmp/gpu-check}
mkdir -p "$R"
exec > >(tee -a "$R/log.txt") 2>&1
left() { local s=$((DEADLINE - $(date +%s))); echo $((s > 5 ? s : 5)); }
say() { echo "[gpu_check +$(($(date +%s) - START))s] $*"; }
want() { [[ " ${GPU_CHECK_STEPS:-probe tests thunder-suite adam generate fuzz} " == *" $1 "* ]]; }

if [ -n "${GPU_CHECK_PYTHON:-}" ]; then
    PY=("$(cd "$(dirname "$GPU_CHECK_PYTHON")" && pwd)/$(basename "$GPU_CHECK_PYTHON")")  # absolute: a step runs in /tmp
else
    . .gpu-kit/activate.sh
    # thunder-ext itself, built from this tree with the machine's setuptools (nothing to fetch)
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/gpu-site . \
        || say "installing thunder-ext failed"
    # -P: the source folders are laid out for setuptools' package-dir, the install is not
    PY=(python3 -P)
fi
say "set up"
"${PY[@]}" - <<'EOF'
import json, platform, subprocess, torch, thunder
from thunder_ext.executors import nvfuser_inplace_available
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip() if torch.cuda.is_available() else "no CUDA"
ok, why = nvfuser_inplace_available()
print("ENV " + json.dumps({"gpu": gpu, "python": platform.python_version(), "torch": torch.__version__,
      "cuda": torch.version.cuda, "thunder": thunder.__version__, "nvfuser": ok, "nvfuser_why": why,
      "default_executors": [e.name for e in thunder.get_default_executors()]}))
EOF
# first, in the foreground and into this log: the probe of the last run's open question (a few seconds)
want probe && { timeout 120 "${PY[@]}" scripts/gpu_probe.py || say "the probe failed"; }
export THUNDER_EXT_TIMING_LOCK=/tmp/gpu-check-timing.lock PYTHONUNBUFFERED=1
TIMEOUT_FLAGS=()
"${PY[@]}" -c "import pytest_timeout" 2>/dev/null && TIMEOUT_FLAGS=(--timeout 240)

export THUNDER_EXT_CACHE=0  # every compilation measured as a first process's
STEPS=()  # the background steps' pids: a plain `wait` would also wait for the log's tee
run() {  # run NAME LOG CMD...: in the background, stopped at the deadline (SIGINT first: pytest then reports)
    local name=$1 log=$2
    shift 2
    say "start $name"
    (timeout -s INT -k 15 "$(left)" "$@" >>"$log" 2>&1; say "end $name: exit $?") &
    STEPS+=($!)
}

# -v: each test's outcome is in the log as it ends, for a run stopped before pytest's summary (one was)
want tests && run "tests/test_gpu.py" "$R/test_gpu.log" "${PY[@]}" -m pytest tests/test_gpu.py \
    tests/test_fuzz_against_eager.py::test_regression_on_cuda -v -rfEs -p no:cacheprovider \
    -n "${GPU_CHECK_WORKERS:-4}" "${TIMEOUT_FLAGS[@]}" --junitxml="$R/test_gpu.xml" ${GPU_CHECK_K:+-k "$GPU_CHECK_K"}
# from /tmp, so that this project's pytest settings do not apply (docs/thunder_suites.md)
want thunder-suite && run "thunder's litgpt KV-cache variants" "$R/thunder_suite.log" bash -c 'cd /tmp &&
        echo "== thunder.tests.test_jit_general -k \"litgpt_variants_kvcache and cuda\" --thunder-ext"
        "$@" -m pytest -q -rfEs -p no:cacheprovider -n 2 --thunder-ext --pyargs thunder.tests.test_jit_general \
            -k "litgpt_variants_kvcache and cuda"' _ "${PY[@]}"
want adam && run "adam profile" "$R/adam_profile.log" "${PY[@]}" scripts/gpu_adam_profile.py --device "$DEVICE"
want compile-profile && run "compile profile" "$R/compile_profile.log" "${PY[@]}" scripts/gpu_compile_profile.py \
    --device "$DEVICE"
IFS=';' read -ra CONFIGS <<<"${GPU_CHECK_GENERATE:-SmolLM2-135M 2048 eager,growing;demo 2048 eager,growing,graphs}"
want generate || CONFIGS=()
for config in "${CONFIGS[@]}"; do
    set -- $config
    # the timed calls need a minute after the last compilation
    run "generate $1 $2" "$R/generate.log" "${PY[@]}" -m thunder_ext.benchmarks.cuda_generate --device "$DEVICE" \
        --model "$1" --length "$2" --runners "$3" --time-by $((DEADLINE - 60)) --out "$R/generate.jsonl"
done
FUZZ_K="test_random_inplace_programs_match_eager and not fake"
# the fuzzer saves what fails into tests/fuzz_regressions/cuda: in a copy of the tree, so that the test run above,
# collecting that folder on several workers, does not see it change (it did: "Different tests were collected")
FUZZ_TREE=/tmp/gpu-check-fuzz-tree
rm -rf "$FUZZ_TREE" && mkdir -p "$FUZZ_TREE" && cp -rp tests pyproject.toml "$FUZZ_TREE"/  # -p: only new files are newer
IFS=';' read -ra FUZZ_RUNS <<<"${GPU_CHECK_FUZZ:-defaults 1 no-grad;defaults 3 grad}"
want fuzz || FUZZ_RUNS=()
for fuzz in "${FUZZ_RUNS[@]}"; do
    set -- $fuzz  # executor set, seed, grad or no-grad
    run "fuzz $fuzz" "/tmp/gpu-check-fuzz-$1-$2.log" nice -n 15 env -C "$FUZZ_TREE" THUNDER_EXT_FUZZ_DEVICE="$DEVICE" \
        THUNDER_EXT_FUZZ_EXAMPLES=100000 THUNDER_EXT_FUZZ_TALLY="/tmp/gpu-check-fuzz-$1-$2.tally" \
        "${PY[@]}" -m pytest tests/test_fuzz_against_eager.py -q -p no:cacheprovider -p no:randomly \
        --executor-set "$1" -k "$FUZZ_K and $([ "$3" = grad ] || echo not) require_grad" \
        --hypothesis-seed="$2" --hypothesis-show-statistics
done
# saved programs replayed against eager with and without nvFuser and with stock thunder, with their traces
want replay && run "replay" "$R/replay.log" "${PY[@]}" scripts/replay_on_device.py --device "$DEVICE" \
    ${GPU_CHECK_REPLAY:-tests/fuzz_regressions/cuda/*.py}
# which views of a graph's intermediate Inductor returns apart on this device: a row per layout, side by side
want inductor-views && for layout in "a * 1.5" "a.transpose(0, 2) * 1.5" "a.diagonal() * 1.5" \
    "a.permute(1, 2, 0) * 1.5" "a[:, ::2] * 1.5" "a.sum(0) * 1.5"; do
    run "inductor views of $layout" "$R/inductor_views.log" "${PY[@]}" scripts/probe_inductor_view_outputs.py \
        --device "$DEVICE" --layout "$layout"
done
wait "${STEPS[@]}"
want fuzz && {
    for fuzz in "${FUZZ_RUNS[@]}"; do
        set -- $fuzz
        echo "== fuzz $fuzz (executor set, seed, inputs that require grad or not)"
        sort "/tmp/gpu-check-fuzz-$1-$2.tally" 2>/dev/null | uniq -c
        tail -n 40 "/tmp/gpu-check-fuzz-$1-$2.log"
    done
    echo "== failing programs saved"
    find "$FUZZ_TREE/tests/fuzz_regressions" -type f -newer /tmp/gpu-check-start | while read -r path; do
        echo "--- $path"
        cat "$path"
    done
} >"$R/fuzz.log" 2>&1
say "done"
