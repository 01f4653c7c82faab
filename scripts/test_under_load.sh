#!/usr/bin/env bash
# The timing-prone tests under injected CPU load (issue 35 item 1): a user's machine is not idle.
# Starts PBKV_LOAD_JOBS busy Python processes (default 2, each spinning one core), runs pytest on
# the given paths (default: tests/examples and tests/server/http, where servers, subprocesses and
# paced requests meet the wall clock), then stops the busy processes, also when pytest fails or the
# script is interrupted. Extra pytest arguments follow the paths, e.g.
#   bash scripts/test_under_load.sh                                  # both folders, fast lane and slow
#   bash scripts/test_under_load.sh tests/sdk -- -m "not slow"       # other paths, pytest options after --
# It prints the load before and after and the wall time; exit status is pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
export CREWAI_DISABLE_TELEMETRY=true OTEL_SDK_DISABLED=true CREWAI_TRACING_ENABLED=false
export PBKV_DATA_DIR=${PBKV_DATA_DIR:-$(cd .. && pwd)/shared/data}
python=${PBKV_PYTHON:-.venv/bin/python}
jobs=${PBKV_LOAD_JOBS:-2}
workers=${PBKV_TEST_WORKERS:-3}
case "$jobs" in ''|*[!0-9]*) echo "PBKV_LOAD_JOBS=$jobs: give a whole number of busy processes" >&2; exit 2;; esac

paths=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do paths+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#paths[@]} -eq 0 ] && paths=(tests/examples tests/server/http)

busy=()
stop_busy() { for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_busy EXIT INT TERM
for _ in $(seq 1 "$jobs"); do
  "$python" -c 'while True: pass' &
  busy+=("$!")
done
echo "under load: $jobs busy processes (pids ${busy[*]}); $(uptime)"
start=$(date +%s)
rc=0
"$python" -m pytest "${paths[@]}" -n "$workers" --dist worksteal -p no:cacheprovider "$@" || rc=$?
echo "under load: pytest exit $rc after $(( $(date +%s) - start )) s wall; $(uptime)"
exit "$rc"
