#!/usr/bin/env bash
# GPU check of the PBKV vLLM plugin: one prepared run for one GPU without internet, <= 10 minutes.
#
#   bash scripts/gpu_check_vllm.sh       # results in ${OUT:-out/gpu_check_vllm}
#
# A vLLM server does not run on the CPU-only machines of this project (the vllm==0.33.0 wheel has
# no CPU platform: vllm.platforms resolves to UnspecifiedPlatform and vllm._C is absent; with the
# shared CPU package list `vllm serve` already stops importing its CLI, on watchfiles and then
# orjson, which the list lacks), so the plugin's live path is checked here, in a full CUDA install:
# 1. writes the seeded tiny Qwen2 model (pbkv_server.testing.sglang.tiny_model; no download),
# 2. takes a trace (TRACE=path, else a seeded synthetic one from `pbkv-bench synth`),
# 3. starts vLLM with its own LRU (`pbkv-server --engine vllm --policy lru`), live-replays it,
# 4. restarts it with the plugin (`--policy pbkv-he`: PBKVBlockPool, PBKVConnector, middleware),
#    checks that the plugin serves (`python -m pbkv_server.loadgen.gpu_check active vllm`: the
#    workflow-end route answers 204 and GET /pbkv/v1/kv_hints carries X-PBKV-KV-Hints; exit 3 when
#    not), and replays again,
# 5. with OFFLOAD=1 also a run with the CPU offload tier in PBKV's order (MultiConnector of
#    OffloadingConnector with eviction_policy "pbkv" and PBKVConnector),
# 6. prints the runs' hit rates and latencies side by side (JSON summaries kept in $OUT), then
#    live against simulated for lru and pbkv (`gpu_check sim-vllm`: the same requests in the
#    simulator at the block pool, timing from GPU_CHECK_SIM_PROFILE, default h200-qwen3-32b; the
#    chat API's template adds tokens the simulator does not see, so hit rates compare closely and
#    latencies only roughly).
#
# Needs: an environment with a CUDA build of vllm==0.33.0 and this project installed
# (`pip install --no-deps -e .`), selected by PBKV_VLLM_PYTHON (default .venv-vllm/bin/python).
# Knobs: GPU_CHECK_WORKFLOWS (16), GPU_CHECK_CONCURRENCY (8), GPU_CHECK_PORT (31100),
# GPU_CHECK_START_TIMEOUT (300 s per start), GPU_CHECK_MAX_OUTPUT_TOKENS (64),
# GPU_CHECK_GPU_BLOCKS (--num-gpu-blocks-override, 512: small, so that eviction happens).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PBKV_VLLM_PYTHON:-.venv-vllm/bin/python}
export PBKV_VLLM_PYTHON=$PY PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-out/gpu_check_vllm}
WORKFLOWS=${GPU_CHECK_WORKFLOWS:-16}
CONC=${GPU_CHECK_CONCURRENCY:-8}
PORT=${GPU_CHECK_PORT:-31100}
START_TIMEOUT=${GPU_CHECK_START_TIMEOUT:-300}
MAX_OUT=${GPU_CHECK_MAX_OUTPUT_TOKENS:-64}
BLOCKS=${GPU_CHECK_GPU_BLOCKS:-512}
SIM_PROFILE=${GPU_CHECK_SIM_PROFILE:-h200-qwen3-32b}
MODEL_DIR="$OUT/model"
mkdir -p "$OUT"
export VLLM_PLUGINS=${VLLM_PLUGINS:-pbkv}   # only our plugin, even if others are installed
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
SECONDS=0
log() { echo "[gpu_check_vllm ${SECONDS}s] $*"; }

log "python: $PY"
"$PY" - <<'PYEOF'
import importlib.metadata as md, torch
print("vllm", md.version("vllm"), "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
assert torch.cuda.is_available(), "this check needs a GPU"
PYEOF

[ -f "$MODEL_DIR/config.json" ] || "$PY" -m pbkv_server.testing.sglang.tiny_model --out "$MODEL_DIR"
TRACE=${TRACE:-$OUT/trace.jsonl}
[ -f "$TRACE" ] || "$PY" -m pbkv_server.cli.bench synth --graph mixed --workflows "$WORKFLOWS" --seed 0 --out "$TRACE"

SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || kill -TERM "$SERVER_PID" || true
    for _ in $(seq 1 30); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT

run_one() {  # name, policy, extra vLLM flags...
  local name=$1 policy=$2; shift 2
  log "starting vLLM ($name, policy $policy): $*"
  setsid "$PY" -c "from pbkv_server.cli.server import app; app()" --engine vllm --policy "$policy" -- "$MODEL_DIR" \
      --host 127.0.0.1 --port "$PORT" --max-model-len 4096 --num-gpu-blocks-override "$BLOCKS" \
      --gpu-memory-utilization 0.3 --enforce-eager "$@" >"$OUT/server_$name.log" 2>&1 &
  SERVER_PID=$!
  local waited=0
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then log "server died; tail of its log:"; tail -40 "$OUT/server_$name.log"; exit 1; fi
    if [ "$waited" -ge "$START_TIMEOUT" ]; then log "server not ready after ${START_TIMEOUT}s"; tail -40 "$OUT/server_$name.log"; exit 1; fi
    sleep 2; waited=$((waited + 2))
  done
  log "server ($name) ready after ${waited}s"
  if [ "$policy" != lru ]; then
    "$PY" -m pbkv_server.loadgen.gpu_check active vllm "http://127.0.0.1:$PORT" \
        || { log "the PBKV plugin is not serving"; exit 3; }
    grep -h "PBKV vLLM plugin\|PBKV vLLM runtime" "$OUT/server_$name.log" | head -3 || true
  fi
  log "replaying ($name)"
  "$PY" -m pbkv_server.cli.bench live-replay "$TRACE" --target "http://127.0.0.1:$PORT" --api chat \
      --concurrency "$CONC" --max-output-tokens "$MAX_OUT" --json "$OUT/replay_$name.json"
  stop_server
}

run_one lru lru
run_one pbkv pbkv-he
RUNS=(lru pbkv)
if [ "${OFFLOAD:-0}" = 1 ]; then
  cfg='{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":{"connectors":[
{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":{"cpu_bytes_to_use":1073741824,"eviction_policy":"pbkv"}},
{"kv_connector":"PBKVConnector","kv_role":"kv_both"}]}}'
  run_one pbkv_offload pbkv-he --kv-transfer-config "$(echo "$cfg" | tr -d '\n')"
  RUNS+=(pbkv_offload)
fi

"$PY" - "$OUT" "${RUNS[@]}" <<'PYEOF'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
def ms(v): return "-" if v is None else f"{v * 1e3:8.1f} ms"
print(f"{'run':16} {'hit rate':>9} {'TTFT mean':>11} {'TTFT p90':>11} {'req lat.':>11} {'errors':>6}")
for name in names:
    s = json.load(open(f"{out}/replay_{name}.json"))
    print(f"{name:16} {s['hit_rate']:9.3f} {ms(s['ttft_mean_s']):>11} {ms(s['ttft_p90_s']):>11} "
          f"{ms(s['latency_mean_s']):>11} {s['errors']:>6}")
PYEOF
for run in lru:lru pbkv:pbkv-he; do
  "$PY" -m pbkv_server.loadgen.gpu_check sim-vllm "$TRACE" --live "$OUT/replay_${run%%:*}.json" --policy "${run##*:}" \
      --device-tokens $((BLOCKS * 16)) --page-size 16 --concurrency "$CONC" --max-output-tokens "$MAX_OUT" \
      --profile "$SIM_PROFILE" --out "$OUT/compare_${run%%:*}.json"
done
"$PY" -m pbkv_server.loadgen.gpu_check compare "$OUT" lru pbkv
log "done"
