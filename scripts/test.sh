#!/usr/bin/env bash
# The test command of README.md: installs what it needs, then runs every test suite.
#   1. .venv (client SDK, server, predictor, examples): pytest tests/ (SGLang and vLLM tests excluded)
#   2. .venv-sglang (the inference server's own environment): pytest tests/sglang
#   3. .venv-vllm (vLLM's environment, from ../shared/vllm-cpu-packages.txt): pytest tests/vllm
set -euo pipefail
cd "$(dirname "$0")/.."
export CREWAI_DISABLE_TELEMETRY=true OTEL_SDK_DISABLED=true CREWAI_TRACING_ENABLED=false
export PBKV_DATA_DIR=${PBKV_DATA_DIR:-$(cd .. && pwd)/shared/data}
bash scripts/setup.sh
# Every suite always runs (a failure in one must not hide the others' results); the
# script fails at the end when any did.
main_rc=0
.venv/bin/python -m pytest tests --ignore=tests/sglang --ignore=tests/vllm "$@" || main_rc=$?
sglang_rc=0
if [ -f scripts/setup_sglang.sh ] && [ -d tests/sglang ] && ls tests/sglang/test_*.py >/dev/null 2>&1; then
  bash scripts/setup_sglang.sh
  .venv-sglang/bin/python -m pytest tests/sglang -p no:cacheprovider "$@" || sglang_rc=$?
fi
vllm_rc=0
if [ -f scripts/setup_vllm.sh ] && [ -d tests/vllm ] && ls tests/vllm/test_*.py >/dev/null 2>&1; then
  bash scripts/setup_vllm.sh || vllm_rc=$?
  if [ "$vllm_rc" -eq 0 ]; then
    .venv-vllm/bin/python -m pytest tests/vllm -p no:cacheprovider "$@" || vllm_rc=$?
  fi
fi
if [ "$main_rc" -ne 0 ] || [ "$sglang_rc" -ne 0 ] || [ "$vllm_rc" -ne 0 ]; then
  echo "tests failed: main suite exit $main_rc, SGLang suite exit $sglang_rc, vLLM suite exit $vllm_rc" >&2
  exit 1
fi
