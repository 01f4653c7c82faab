#!/usr/bin/env bash
# GPU check of the PBKV SGLang plugin: one prepared run for one H200 without internet, <= 10 minutes.
#
#   bash scripts/gpu_check.sh            # results in ${OUT:-out/gpu_check}
#
# 1. writes a random-weight model directory from a public architecture config (Qwen2.5-0.5B's
#    published config.json values, typed in below; no download) with transformers,
# 2. takes a trace (TRACE=path, else a seeded synthetic one from `pbkv-bench synth`),
# 3. starts SGLang with LRU, probes it idle (`pbkv-bench probe-profile`: the simulator's timing),
#    then `pbkv-bench live-compare`: the trace live and the same requests in the simulator,
# 4. restarts SGLang with the PBKV plugin (policy pbkv, --radix-cache-backend pbkv), checks that
#    the plugin serves (`python -m pbkv_server.loadgen.gpu_check active`: exit 3 when it does not),
#    and runs live-compare again,
# 5. prints live against simulated hit rate and speedups of pbkv over lru (gpu_check compare;
#    JSON kept in $OUT). The device tier only, as the CPU live check (docs/sglang-plugin.md):
#    live-compare models no host tier, so HiCache stays off.
#
# Needs: an environment with a CUDA build of sglang==0.5.23 and this project installed
# (`pip install --no-deps -e .`), selected by PBKV_SGLANG_PYTHON (default .venv-sglang/bin/python).
# Knobs: GPU_CHECK_WORKFLOWS (16), GPU_CHECK_CONCURRENCY (8), GPU_CHECK_PORT (31000),
# GPU_CHECK_DEVICE_TOKENS (default: a quarter of the trace's distinct tokens, >= 8192),
# GPU_CHECK_START_TIMEOUT (240 s per server start), GPU_CHECK_MAX_OUTPUT_TOKENS (256: caps each
# request's recorded output length so that both runs fit the time limit).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PBKV_SGLANG_PYTHON:-.venv-sglang/bin/python}
OUT=${OUT:-out/gpu_check}
WORKFLOWS=${GPU_CHECK_WORKFLOWS:-16}
CONC=${GPU_CHECK_CONCURRENCY:-8}
PORT=${GPU_CHECK_PORT:-31000}
START_TIMEOUT=${GPU_CHECK_START_TIMEOUT:-240}
MAX_OUT=${GPU_CHECK_MAX_OUTPUT_TOKENS:-256}
MODEL_DIR="$OUT/model"
mkdir -p "$OUT"
export SGLANG_PLUGINS=${SGLANG_PLUGINS:-pbkv}   # only our plugin, even if others are installed
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
SECONDS=0
log() { echo "[gpu_check ${SECONDS}s] $*"; }

log "python: $PY"
"$PY" - <<'PYEOF'
import importlib.metadata as md, torch
print("sglang", md.version("sglang"), "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
assert torch.cuda.is_available(), "this check needs a GPU"
PYEOF

# ---- 1. random-weight model directory from a public config -----------------------------
if [ ! -f "$MODEL_DIR/config.json" ]; then
  log "writing random-weight model to $MODEL_DIR"
  "$PY" - "$MODEL_DIR" <<'PYEOF'
import sys, torch
from transformers import AutoModelForCausalLM, Qwen2Config
# Qwen/Qwen2.5-0.5B-Instruct config.json (public), typed in: no network access needed.
cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="bfloat16",
                  bos_token_id=151643, eos_token_id=151645, sliding_window=None, use_sliding_window=False)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
model.save_pretrained(sys.argv[1], safe_serialization=True)
print("saved", sum(p.numel() for p in model.parameters()) / 1e6, "M parameters")
PYEOF
fi

# ---- 2. trace ------------------------------------------------------------------------------
TRACE=${TRACE:-$OUT/trace.jsonl}
if [ ! -f "$TRACE" ]; then
  log "synthesising $WORKFLOWS workflows into $TRACE"
  "$PY" -m pbkv_server.cli.bench synth --graph mixed --workflows "$WORKFLOWS" --seed 0 --out "$TRACE"
fi
DEVICE_TOKENS=${GPU_CHECK_DEVICE_TOKENS:-$("$PY" - "$TRACE" <<'PYEOF'
import sys
from pbkv_contract.trace import InvocationRecord, read_trace
seen = {}
for r in read_trace(sys.argv[1]):
    if isinstance(r, InvocationRecord):
        for h, n in zip(r.prefix_hashes, r.tokens_per_block()):
            seen.setdefault(h, n)
print(max(8192, sum(seen.values()) // 4))
PYEOF
)}
log "device KV capacity for the check: $DEVICE_TOKENS tokens (no host tier)"

# ---- 3./4. two runs ------------------------------------------------------------------------
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

run_one() {  # name, policy flags...
  local name=$1; shift
  log "starting SGLang ($name): $*"
  setsid "$PY" -m sglang.launch_server --model-path "$MODEL_DIR" --skip-tokenizer-init \
      --host 127.0.0.1 --port "$PORT" --max-total-tokens "$DEVICE_TOKENS" \
      --cuda-graph-max-bs-decode 16 --cuda-graph-backend-prefill disabled \
      --mem-fraction-static 0.5 --log-level warning "$@" >"$OUT/server_$name.log" 2>&1 &
  SERVER_PID=$!
  local waited=0
  until curl -sf "http://127.0.0.1:$PORT/health_generate" >/dev/null 2>&1; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then log "server died; tail of its log:"; tail -40 "$OUT/server_$name.log"; exit 1; fi
    if [ "$waited" -ge "$START_TIMEOUT" ]; then log "server not ready after ${START_TIMEOUT}s"; tail -40 "$OUT/server_$name.log"; exit 1; fi
    sleep 2; waited=$((waited + 2))
  done
  log "server ($name) ready after ${waited}s"
  local url="http://127.0.0.1:$PORT"
  if [ "$name" = lru ]; then  # the simulator's timing, probed on the idle baseline server
    "$PY" -m pbkv_server.cli.bench probe-profile --target "$url" --device-tokens "$DEVICE_TOKENS" \
        --json "$OUT/probe.json"
  else
    "$PY" -m pbkv_server.loadgen.gpu_check active sglang "$url" || { log "the PBKV plugin is not serving"; exit 3; }
  fi
  log "live-compare ($name)"
  "$PY" -m pbkv_server.cli.bench live-compare "$TRACE" --target "$url" --concurrency "$CONC" \
      --max-output-tokens "$MAX_OUT" --profile "$OUT/probe.json" --json "$OUT/compare_$name.json"
  stop_server
}

run_one lru --radix-eviction-policy lru
run_one pbkv --radix-eviction-policy pbkv --radix-cache-backend pbkv

# ---- 5. comparison ---------------------------------------------------------------------------
"$PY" -m pbkv_server.loadgen.gpu_check compare "$OUT" lru pbkv
log "done"
