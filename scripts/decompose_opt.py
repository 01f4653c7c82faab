"""Where the offline reference's gain comes from: replay cells, print the decomposition as markdown.

Each cell is one ``pbkv-bench replay --json`` of a trace at one device size and host ratio, under
``lru``, ``pbkv``, ``opt`` and its hybrids (``opt-device``: MIN on the device only; ``opt-host``:
MIN on the host only; ``opt-ref``: opt with the timing-only order instead of its own), plus
``pbkv`` once more with ``--predictor oracle`` (the exact next agent: what prediction alone can
give). ``opt`` vs ``lru`` is a 2 x 2 design (device order x host order, each LRU or MIN), so its
latency gain splits exactly into a device and a host share (two-factor Shapley split: each
factor's effect averaged over both settings of the other):

    device share = ((L_lru - L_opt-device) + (L_opt-host - L_opt)) / 2 / (L_lru - L_opt)
    host share   = ((L_lru - L_opt-host) + (L_opt-device - L_opt)) / 2 / (L_lru - L_opt)
    own-order share = (L_opt-ref - L_opt) / (L_lru - L_opt)

Usage (the figures of ``docs/design/offline-reference.md``)::

    python scripts/decompose_opt.py --out /tmp/decomp [--cells hover-48k-h1,...] > table.md

Replays are cached in ``--out`` (a cell's JSON is reused when present; ``--force`` replays again).
Timings of each replay go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY
from pbkv_server.engine.policies.opt_hybrids import ISOLATES

#: name -> (trace, or "synth:GRAPH:WORKFLOWS:SEED"; profile; concurrency; device tokens; host ratio)
CELLS = {
    "hover-48k-h1": ("runs/hover_langchain/test.jsonl", "a6000-qwen3-14b", 72, 48_000, 1.0),
    "hover-24k-h1": ("runs/hover_langchain/test.jsonl", "a6000-qwen3-14b", 72, 24_000, 1.0),
    "hover-96k-h0": ("runs/hover_langchain/test.jsonl", "a6000-qwen3-14b", 72, 96_092, 0.0),
    "hover-48k-h0": ("runs/hover_langchain/test.jsonl", "a6000-qwen3-14b", 72, 48_000, 0.0),
    "codegen-60k-h1": ("synth:codegen:300:1", "h100-qwen2.5-32b", 16, 60_000, 1.0),
    "codegen120-60k-h1": ("synth:codegen:120:1", "h100-qwen2.5-32b", 16, 60_000, 1.0),
    "swe-24k-h1": ("runs/swe_autogen/test.jsonl", "a6000-qwen3-14b", 32, 24_000, 1.0),
    "swe-12k-h1": ("runs/swe_autogen/test.jsonl", "a6000-qwen3-14b", 32, 12_000, 1.0),
    "finance-8k-h1": ("runs/finance_crewai/test.jsonl", "a6000-qwen3-14b", 32, 8_000, 1.0),
    # the regime study's synthetic cells (C=16, f=0.25, no host tier: device = A + 0.25 W)
    "codegen40-199k-h0": ("synth:codegen:40:1", "h100-qwen2.5-32b", 16, 198_536, 0.0),
    "research60-99k-h0": ("synth:research:60:1", "h100-qwen2.5-32b", 16, 99_074, 0.0),
}
LRU, PBKV, OPT = BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY
DEVICE, HOST, ORDER = ISOLATES["device order"], ISOLATES["host order"], ISOLATES["own order"]
REFERENCES = (LRU, PBKV, OPT, DEVICE, HOST, ORDER)
ORACLE = f"{PBKV}+oracle"  # the pbkv row replayed with the oracle predictor
ROWS = (LRU, PBKV, ORACLE, OPT, DEVICE, HOST, ORDER)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the replay JSON (reused when present)")
    ap.add_argument("--cells", default=",".join(CELLS), help=f"comma-separated cells (known: {', '.join(CELLS)})")
    ap.add_argument("--predictor", default="markov", help="predictor of the pbkv row (default markov)")
    ap.add_argument("--force", action="store_true", help="replay again even when the JSON is there")
    args = ap.parse_args(argv)
    cells = [c.strip() for c in args.cells.split(",") if c.strip()]
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        print(f"decompose_opt: unknown cell(s) {', '.join(unknown)}; known: {', '.join(CELLS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    print("| cell | policy | mean latency s | speedup vs lru | latency capture | device hits | host hits "
          "| prefill saved |")
    print("|---|---|---|---|---|---|---|---|")
    shares = []
    for cell in cells:
        rows = replay_cell(cell, args.out, args.predictor, args.force)
        base, ref = rows[LRU]["mean_latency_s"], rows[OPT]["mean_latency_s"]
        for name in ROWS:
            s = rows[name]
            lat = s["mean_latency_s"]
            cap = (base - lat) / (base - ref) if base - ref > 0.005 * base else None
            print(f"| {cell} | {name} | {lat:.1f} | {base / lat:.3f}x | {_fmt(cap)} | "
                  f"{100 * s['hit_rate']:.1f}% | {100 * s['host_hit_rate']:.1f}% | {100 * s['prefill_saved']:.1f}% |")
        shares.append((cell, split(rows)))
    print()
    print("| cell | opt gain over lru | device-order share | host-order share | own-order share (opt-ref - opt) "
          "| pbkv capture | pbkv+oracle capture |")
    print("|---|---|---|---|---|---|---|")
    for cell, sh in shares:
        print(f"| {cell} | {100 * sh['gain']:.1f}% | {_fmt(sh['device'])} | {_fmt(sh['host'])} | {_fmt(sh['order'])} "
              f"| {_fmt(sh['online'])} | {_fmt(sh['oracle'])} |")
    return 0


def split(rows: dict[str, dict]) -> dict[str, float | None]:
    """The shares of the module docstring from each row's ``mean_latency_s`` (``None`` when opt is
    not at least 0.5 % faster than lru: nothing to split)."""
    lat = {k: v["mean_latency_s"] for k, v in rows.items()}
    gain = lat[LRU] - lat[OPT]
    out: dict[str, float | None] = {"gain": gain / lat[LRU]}
    if gain <= 0.005 * lat[LRU]:
        return {**out, "device": None, "host": None, "order": None, "online": None, "oracle": None}
    out["device"] = ((lat[LRU] - lat[DEVICE]) + (lat[HOST] - lat[OPT])) / 2 / gain
    out["host"] = ((lat[LRU] - lat[HOST]) + (lat[DEVICE] - lat[OPT])) / 2 / gain
    out["order"] = (lat[ORDER] - lat[OPT]) / gain
    out["online"] = (lat[LRU] - lat[PBKV]) / gain
    out["oracle"] = (lat[LRU] - lat[ORACLE]) / gain
    return out


def replay_cell(cell: str, out: Path, predictor: str, force: bool) -> dict[str, dict]:
    """``{row name: replay summary}`` of one cell (two replays: the references with ``predictor``,
    and ``pbkv`` with the oracle predictor)."""
    trace, profile, concurrency, device, host_ratio = CELLS[cell]
    if trace.startswith("synth:"):
        _, graph, workflows, seed = trace.split(":")
        trace = str(out / f"synth-{graph}-{workflows}-{seed}.jsonl")
        if not Path(trace).exists():
            _bench("synth", "--graph", graph, "--workflows", workflows, "--seed", seed, "--out", trace)
    common = ["--concurrency", str(concurrency), "--profile", profile, "--device-tokens", str(device),
              "--host-ratio", str(host_ratio)]
    rows: dict[str, dict] = {}
    for tag, policies, pred in (("refs", ",".join(REFERENCES), predictor), ("oracle", PBKV, "oracle")):
        path = out / f"{cell}-{tag}.json"
        if force or not path.exists():
            t0 = time.perf_counter()
            _bench("replay", trace, "--policy", policies, "--predictor", pred, "--json", str(path), *common)
            print(f"{cell} {tag}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        data = json.loads(path.read_text())
        if tag == "refs":
            rows.update({p: data[p] for p in REFERENCES})
        else:
            rows[ORACLE] = data[PBKV]
    return rows


def _bench(*args: str) -> None:
    cmd = [sys.executable, "-m", "pbkv_server.cli.bench", *args]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ)
    if done.returncode:
        raise SystemExit(f"decompose_opt: {' '.join(args[:2])} failed: {done.stderr.strip().splitlines()[-1:]}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main())
