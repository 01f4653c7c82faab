#!/usr/bin/env bash
# Create .venv with PBKV and every framework it integrates with (idempotent).
# torch is pinned to 2.13.0: that CPU wheel is what this project is tested with.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -c constraints.txt -e ".[all]"
echo "PBKV environment ready in .venv"
