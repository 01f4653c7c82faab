#!/usr/bin/env bash
# Create .venv-sglang: the inference server's own environment (SGLang 0.5.23 + the PBKV plugin).
# Idempotent; works on a clean machine with PyPI (or the local wheel store) reachable.
#   1. torch==2.13.0 first (the CPU wheel this project is tested with; never another torch),
#   2. every pinned line of scripts/sglang-requirements.txt with --no-deps (SGLang's declared
#      dependencies pull CUDA-only packages that do not install on a CPU machine),
#   3. the test tools, then this project itself (editable, --no-deps) so that the
#      `sglang.srt.plugins` entry point `pbkv` is registered,
#   4. TEST ENVIRONMENT ONLY: when torchvision cannot be imported (no CPU build here), a tiny
#      import stub from scripts/sglang_test_stubs/ so that sglang.srt.configs imports. It is never
#      installed on a machine that has a real torchvision (e.g. the GPU check).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${PBKV_SGLANG_VENV:-.venv-sglang}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
P="$VENV/bin/python"
"$P" -m pip install -q --upgrade pip
"$P" -m pip install -q torch==2.13.0
"$P" -m pip install -q --no-deps -r scripts/sglang-requirements.txt
"$P" -m pip install -q "pytest==$(grep -i '^pytest==' constraints.txt | cut -d= -f3)" \
  "pytest-timeout==$(grep -i '^pytest-timeout==' constraints.txt | cut -d= -f3)" \
  "hypothesis==$(grep -i '^hypothesis==' constraints.txt | cut -d= -f3)"
"$P" -m pip install -q --no-deps -e .
if ! "$P" -c "import torchvision" >/dev/null 2>&1; then
  # Built from a temporary copy so that no build/ or egg-info lands in the checkout.
  STUB_TMP=$(mktemp -d)
  cp -r scripts/sglang_test_stubs/. "$STUB_TMP"
  "$P" -m pip install -q --no-deps "$STUB_TMP"
  rm -rf "$STUB_TMP"
fi
"$P" -c "import sglang, pbkv_server; print('PBKV SGLang environment ready in $VENV, sglang', sglang.__version__)"
