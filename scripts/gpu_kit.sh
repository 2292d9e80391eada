#!/usr/bin/env bash
# Builds .gpu-kit/ for scripts/gpu_check.sh, here, where the package registries are reachable: the workplace's kit
# (../shared/gpu/make_kit.sh: thunder 0.2.6, litgpt 0.5.13, nvFuser 0.2.36 and a shim for torch 2.11), plus the
# transformers this project pins (constraints.txt): the GPU machine has transformers 5, outside what thunder
# 0.2.6's HF recipe supports, and litgpt imports transformers, which turns on the extension's HF integration.
set -euo pipefail
cd "$(dirname "$0")/.."
bash "${MAKE_KIT:-../shared/gpu/make_kit.sh}"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu-kit/wheels transformers==4.55.4 huggingface-hub==0.36.2 tokenizers==0.21.4
du -sh .gpu-kit
