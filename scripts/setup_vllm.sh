#!/usr/bin/env bash
# Create .venv-vllm: the vLLM inference server's own environment (vLLM 0.33.0 + the PBKV plugin).
# Idempotent; works on a clean machine with PyPI (or the local wheel store) reachable.
#   1. torch==2.13.0 first (the CPU wheel this project is tested with; vLLM 0.33.0 pins torch 2.14.0,
#      but its v1 core, KVCacheManager and BlockPool, imports and runs on 2.13.0),
#   2. every pinned line of the shared package list (../shared/vllm-cpu-packages.txt beside the
#      checkout, PBKV_VLLM_PACKAGES to override) with --no-deps: vLLM's declared dependencies
#      pull CUDA-only packages that do not install on a CPU machine; the torch line is skipped
#      (step 1 installed it, and `torch==2.13.0+cpu` names a local build that no index serves),
#   3. what PBKV itself needs there and the shared list lacks (httpx for pbkv_server, uvicorn for
#      vLLM's API server and the middleware tests), pinned from constraints.txt with --no-deps,
#   4. the test tools, then this project itself (editable, --no-deps) so that the
#      `vllm.general_plugins` entry point `pbkv` is registered.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${PBKV_VLLM_VENV:-.venv-vllm}
PKGS=${PBKV_VLLM_PACKAGES:-../shared/vllm-cpu-packages.txt}
if [ ! -f "$PKGS" ]; then
  echo "setup_vllm.sh: package list $PKGS not found (set PBKV_VLLM_PACKAGES)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
P="$VENV/bin/python"
"$P" -m pip install -q --upgrade pip
"$P" -m pip install -q torch==2.13.0
req=$(mktemp)
trap 'rm -f "$req"' EXIT
grep -Ev '^\s*(#|$)|^torch==' "$PKGS" >"$req"
"$P" -m pip install -q --no-deps -r "$req"
pin() { echo "$1==$(grep -i "^$1==" constraints.txt | cut -d= -f3)"; }
"$P" -m pip install -q --no-deps "$(pin httpx)" "$(pin httpcore)" "$(pin uvicorn)" "$(pin httptools)"
"$P" -m pip install -q "$(pin pytest)" "$(pin pytest-timeout)" "$(pin hypothesis)"
"$P" -m pip install -q --no-deps -e .
"$P" -c "import vllm.v1.core.kv_cache_manager, vllm.v1.core.block_pool, pbkv_server; import vllm; print('PBKV vLLM environment ready in $VENV, vllm', vllm.__version__)"
