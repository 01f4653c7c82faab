"""Where the offline reference's gain comes from: replay cells, print the decomposition as markdown.

Each cell is one ``pbkv-bench replay --json`` of a trace at one device size and host ratio, under
``lru``, ``pbkv``, ``opt`` and its hybrids (``opt-device``: MIN on the device only; ``opt-host``:
MIN on the host only; ``opt-ref``: opt with the timing-only order instead of its own), plus
``pbkv`` once more with ``--predictor oracle`` (the exact next agent: what prediction alone can
give), and ``pbkv-nextuse`` (pbkv told each conversation's true next-call time:
:mod:`pbkv_server.engine.policies.pbkv_nextuse`). ``opt`` vs ``lru`` is a 2 x 2 design (device order x host order, each LRU or MIN), so its
latency gain splits exactly into a device and a host share (two-factor Shapley split: each
factor's effect averaged over both settings of the other):

    device share = ((L_lru - L_opt-device) + (L_opt-host - L_opt)) / 2 / (L_lru - L_opt)
    host share   = ((L_lru - L_opt-host) + (L_opt-device - L_opt)) / 2 / (L_lru - L_opt)
    own-order share = (L_opt-ref - L_opt) / (L_lru - L_opt)

Usage (the figures of ``docs/design/offline-reference.md``)::

    python scripts/decompose_opt.py --out /tmp/decomp [--cells hover-48k-h1,...] > table.md
    python scripts/decompose_opt.py --out /tmp/decomp --cells cc40-h1,cc40-h0 --no-hybrids  # issue 33

A trace ``kvct:N`` is the first N Claude Code conversations of ``$PBKV_DATA_DIR/claude-code``
imported as issue 33 did (``pbkv-sdk import kv-cache-tester --max-conversations N --max-gap 60
--context-limit 128000``); a device of ``None`` is the profile's. ``--no-hybrids`` replays
``lru``, ``pbkv`` and ``opt`` only (the hybrids cost an ``opt`` replay each): the shares are then
``-`` and the capture columns remain.

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
from pbkv_server.engine.policies.pbkv_nextuse import PBKVNextUsePolicy as NextUseOracle
from pbkv_server.predictors.factory import DEFAULT_ONLINE_PREDICTOR

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
    # device below the in-flight working set (about 4 of the 16 running ~10k-token prompts), 1x host
    "codegen60s1-40k-h1": ("synth:codegen:60:1", "h100-qwen2.5-32b", 16, 40_000, 1.0),
    "codegen60s2-40k-h1": ("synth:codegen:60:2", "h100-qwen2.5-32b", 16, 40_000, 1.0),
    "codegen60s3-40k-h1": ("synth:codegen:60:3", "h100-qwen2.5-32b", 16, 40_000, 1.0),
    "codegen120s1-40k-h1": ("synth:codegen:120:1", "h100-qwen2.5-32b", 16, 40_000, 1.0),
    "codegen60s1-40k-h0": ("synth:codegen:60:1", "h100-qwen2.5-32b", 16, 40_000, 0.0),
    # issue 33: 40 real Claude Code conversations on the PBKV paper's testbed, the profile's device
    "cc40-h1": ("kvct:40", "a6000x8-qwen3-32b-tp8", 32, None, 1.0),
    "cc40-h0": ("kvct:40", "a6000x8-qwen3-32b-tp8", 32, None, 0.0),
}
LRU, PBKV, OPT = BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY
DEVICE, HOST, ORDER = ISOLATES["device order"], ISOLATES["host order"], ISOLATES["own order"]
REFERENCES = (LRU, PBKV, OPT, DEVICE, HOST, ORDER)
ORACLE = f"{PBKV}+oracle"  # the pbkv row replayed with the oracle predictor
NEXTUSE = NextUseOracle.name  # pbkv with the true next-call time of each conversation
ROWS = (LRU, PBKV, ORACLE, NEXTUSE, OPT, DEVICE, HOST, ORDER)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the replay JSON (reused when present)")
    ap.add_argument("--cells", default=",".join(CELLS), help=f"comma-separated cells (known: {', '.join(CELLS)})")
    ap.add_argument("--predictor", default=DEFAULT_ONLINE_PREDICTOR, help=f"predictor of the pbkv row (default {DEFAULT_ONLINE_PREDICTOR})")
    ap.add_argument("--force", action="store_true", help="replay again even when the JSON is there")
    ap.add_argument("--no-hybrids", action="store_true", help="replay lru, pbkv and opt only (no share split)")
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
        rows = replay_cell(cell, args.out, args.predictor, args.force, not args.no_hybrids)
        base, ref = rows[LRU]["mean_latency_s"], rows[OPT]["mean_latency_s"]
        for name in ROWS:
            if name not in rows:
                continue
            s = rows[name]
            lat = s["mean_latency_s"]
            cap = (base - lat) / (base - ref) if base - ref > 0.005 * base else None
            print(f"| {cell} | {name} | {lat:.1f} | {base / lat:.3f}x | {_fmt(cap)} | "
                  f"{100 * s['hit_rate']:.1f}% | {100 * s['host_hit_rate']:.1f}% | {100 * s['prefill_saved']:.1f}% |")
        shares.append((cell, split(rows)))
    print()
    print("| cell | opt gain over lru | device-order share | host-order share | own-order share (opt-ref - opt) "
          "| pbkv capture | pbkv+oracle capture | pbkv-nextuse capture |")
    print("|---|---|---|---|---|---|---|---|")
    for cell, sh in shares:
        print(f"| {cell} | {100 * sh['gain']:.1f}% | {_fmt(sh['device'])} | {_fmt(sh['host'])} | {_fmt(sh['order'])} "
              f"| {_fmt(sh['online'])} | {_fmt(sh['oracle'])} | {_fmt(sh['nextuse'])} |")
    return 0


def split(rows: dict[str, dict]) -> dict[str, float | None]:
    """The shares of the module docstring from each row's ``mean_latency_s`` (``None`` when opt is
    not at least 0.5 % faster than lru: nothing to split; ``None`` for a share whose rows were not
    replayed)."""
    lat = {k: v["mean_latency_s"] for k, v in rows.items()}
    gain = lat[LRU] - lat[OPT]
    out: dict[str, float | None] = {"gain": gain / lat[LRU]}
    if gain <= 0.005 * lat[LRU]:
        return {**out, "device": None, "host": None, "order": None, "online": None, "oracle": None,
                "nextuse": None}
    hybrids = all(h in lat for h in (DEVICE, HOST, ORDER))
    out["device"] = ((lat[LRU] - lat[DEVICE]) + (lat[HOST] - lat[OPT])) / 2 / gain if hybrids else None
    out["host"] = ((lat[LRU] - lat[HOST]) + (lat[DEVICE] - lat[OPT])) / 2 / gain if hybrids else None
    out["order"] = (lat[ORDER] - lat[OPT]) / gain if hybrids else None
    out["online"] = (lat[LRU] - lat[PBKV]) / gain
    out["oracle"] = (lat[LRU] - lat[ORACLE]) / gain
    out["nextuse"] = (lat[LRU] - lat[NEXTUSE]) / gain if NEXTUSE in lat else None
    return out


def replay_cell(cell: str, out: Path, predictor: str, force: bool, hybrids: bool = True) -> dict[str, dict]:
    """``{row name: replay summary}`` of one cell (three replays: the references with
    ``predictor`` (without the hybrids: ``lru``, ``pbkv``, ``opt``), ``pbkv`` with the oracle
    predictor, and ``pbkv-nextuse`` with ``predictor``)."""
    trace, profile, concurrency, device, host_ratio = CELLS[cell]
    if trace.startswith("synth:"):
        _, graph, workflows, seed = trace.split(":")
        trace = str(out / f"synth-{graph}-{workflows}-{seed}.jsonl")
        if not Path(trace).exists():
            _bench("synth", "--graph", graph, "--workflows", workflows, "--seed", seed, "--out", trace)
    elif trace.startswith("kvct:"):
        n = trace.split(":")[1]
        trace = str(out / f"kvct-{n}.jsonl")
        if not Path(trace).exists():
            _run("pbkv_sdk.entry", "import", "kv-cache-tester", "--out", trace, "--max-conversations", n,
                 "--max-gap", "60", "--context-limit", "128000")
    common = ["--concurrency", str(concurrency), "--profile", profile, "--host-ratio", str(host_ratio)]
    if device is not None:
        common += ["--device-tokens", str(device)]
    refs = REFERENCES if hybrids else (LRU, PBKV, OPT)
    rows: dict[str, dict] = {}
    for tag, policies, pred in (("refs" if hybrids else "base", ",".join(refs), predictor),
                                ("oracle", PBKV, "oracle"), ("nextuse", NEXTUSE, predictor)):
        path = out / f"{cell}-{tag}.json"
        if force or not path.exists():
            t0 = time.perf_counter()
            _bench("replay", trace, "--policy", policies, "--predictor", pred, "--json", str(path), *common)
            print(f"{cell} {tag}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        data = json.loads(path.read_text())
        if tag == "oracle":
            rows[ORACLE] = data[PBKV]
        else:
            rows.update({p: data[p] for p in policies.split(",")})
    return rows


def _bench(*args: str) -> None:
    _run("pbkv_server.cli.bench", *args)


def _run(module: str, *args: str) -> None:
    """Run ``python -m module args`` (a pbkv CLI); its output is dropped, its failure is one line."""
    if module == "pbkv_sdk.entry":  # the entry module defines the command, it has no __main__
        cmd = [sys.executable, "-c", "import sys; from pbkv_sdk.entry import pbkv_sdk; sys.exit(pbkv_sdk())", *args]
    else:
        cmd = [sys.executable, "-m", module, *args]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ)
    if done.returncode:
        raise SystemExit(f"decompose_opt: {' '.join(args[:2])} failed: {done.stderr.strip().splitlines()[-1:]}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main())
