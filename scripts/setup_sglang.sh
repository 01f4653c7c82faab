#!/usr/bin/env bash
# Create .venv-sglang: the inference server's own environment (SGLang 0.5.23 + the PBKV plugin).
# Idempotent; works on a clean machine with PyPI (or the local wheel store) reachable.
#   1. torch==2.13.0 first (the CPU wheel this project is tested with; never another torch),
#   2. every pinned line of scripts/sglang-requirements.txt with --no-deps (SGLang's declared
#      dependencies pull CUDA-only packages that do not install on a CPU machine),
#   3. the test tools, then this project itself (editable, --no-deps) so that the
#      `sglang.srt.plugins` entry point `pbkv` is registered,
#   4. TEST ENVIRONMENT ONLY, each only when the real package does not import:
#      - torchvision (no CPU build here): scripts/sglang_test_stubs/torchvision_stub, so that
#        sglang.srt.configs imports;
#      - sgl_kernel (no CPU build on PyPI): scripts/sglang_test_stubs/sgl_kernel_stub, so that
#        SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1 --device cpu) starts for the real-server tests.
#      Both raise if anything in them is called. Neither is installed on a machine that has the
#      real package (e.g. the GPU check).
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
install_test_stub() {  # $1 = importable name, $2 = stub folder under scripts/sglang_test_stubs
  if "$P" -c "import $1" >/dev/null 2>&1 && ! "$P" -c "import sys, $1; sys.exit(0 if getattr($1, '__pbkv_test_stub__', False) else 1)"; then
    return  # the real package: never shadow it
  fi
  # Built from a temporary copy so that no build/ or egg-info lands in the checkout.
  local tmp
  tmp=$(mktemp -d)
  cp -r "scripts/sglang_test_stubs/$2/." "$tmp"
  "$P" -m pip install -q --no-deps "$tmp"
  rm -rf "$tmp"
}
install_test_stub torchvision torchvision_stub
install_test_stub sgl_kernel sgl_kernel_stub
"$P" -c "import sglang, pbkv_server; print('PBKV SGLang environment ready in $VENV, sglang', sglang.__version__)"
