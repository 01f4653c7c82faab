"""A policy's speedup over lru at device sizes around one cell: is a one-point figure noise?

On mixed traffic a device a few blocks larger or smaller reorders admissions, and ``lru``'s own
mean latency moves by more than the gap between two policies (chat-mix C=32 at 40k tokens: up to
0.6%). A claim like "never below 0.999x lru" or "trigger A beats trigger B" is therefore checked
over a sweep of sizes: this replays ``lru`` and each policy at ``device + k x step`` for every
offset ``k`` (the host tier scales with the device), and prints the speedup (L_lru / L, >1
faster) at each size, its mean, min and max, the mean per traffic class (mean TTFT speedup per
app) and the guard's mean fallback share.

Usage::

    python benchmarks/device_size_sweep.py --trace chatmix.jsonl --policies pbkv --profile h100-qwen2.5-32b \\
        --concurrency 32 --device 40000 --host-ratio 1 --predictor markov [--offsets=-48,...,48] [--json out.json]

Offsets count ``--step`` tokens (default 1: the default offsets move the device by 4 to 48
tokens, less than a block, which is enough to reorder admissions). Bad input is one line and exit
status 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import OneLineParser, check_output, run_script, write_json  # noqa: E402

from pbkv_contract.settings import list_items  # noqa: E402
from pbkv_contract.trace import read_trace  # noqa: E402
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REPLAY, parse_policy_list  # noqa: E402
from pbkv_server.hardware.profiles import MAX_HOST_RATIO, get_profile  # noqa: E402
from pbkv_server.predictors import DEFAULT_ONLINE_PREDICTOR, make_predictor  # noqa: E402
from pbkv_server.sim.driver import SimulationError  # noqa: E402
from pbkv_server.sim.plain_client import without_hints  # noqa: E402
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate  # noqa: E402

#: Offsets, in steps: eleven sizes, denser near the cell (the sizes of the guard's sweep,
#: docs/design/engine.md, "How the guard's constants were chosen").
OFFSETS = (-48, -32, -16, -8, -4, 0, 4, 8, 16, 32, 48)


def sweep(records, policies: list[str], profile, concurrency: int, device: int, host_ratio: float,
          predictor: str, offsets=OFFSETS, step: int = 1, hints: bool = True) -> dict:
    """``{policy: [{"device", "speedup", "per_app", "fallback"}, ...]}`` over ``device + k x step``.

    ``speedup`` is L_lru / L (mean workflow latency), ``per_app`` {app: TTFT_lru / TTFT} (apps with
    a TTFT under both), ``fallback`` the guard's fallback share of evictions (``None``: unguarded).
    ``hints=False`` replays the trace as a client without the SDK sends it
    (:func:`~pbkv_server.sim.plain_client.without_hints`).
    """
    workload = load_workload(records)
    if not hints:
        workload = without_hints(workload)
    out: dict[str, list] = {p: [] for p in policies}
    for k in offsets:
        size = device + k * step
        base = None
        for policy in [BASELINE_POLICY, *policies]:
            s = simulate(workload, ReplayConfig(policy, profile, device_tokens=size, host_tokens=int(host_ratio * size)),
                         ReplayOptions(concurrency=concurrency, predictor=make_predictor(predictor, 3, records))).summary
            if base is None:
                base = s
                continue
            apps = {a: base["per_app"][a]["mean_ttft_s"] / v["mean_ttft_s"]
                    for a, v in (s.get("per_app") or {}).items() if v.get("mean_ttft_s") and a in base.get("per_app", {})}
            out[policy].append({"device": size, "speedup": base["mean_latency_s"] / s["mean_latency_s"],
                                "per_app": apps, "fallback": (s.get("guard") or {}).get("fallback_eviction_share")})
    return out


def summary_line(policy: str, rows: list[dict]) -> str:
    """One line: mean, min and max speedup over the sizes, per-class means and mean fallback."""
    sp = [r["speedup"] for r in rows]
    apps = sorted({a for r in rows for a in r["per_app"]})
    per_app = " ".join(f"{a or '(none)'} {statistics.mean(r['per_app'][a] for r in rows if a in r['per_app']):.4f}x"
                       for a in apps)
    shares = [r["fallback"] for r in rows if r["fallback"] is not None]
    guard = f"; guard fallback {statistics.mean(shares):.2f}" if shares else ""
    return (f"{policy}: speedup vs lru over {len(rows)} sizes mean {statistics.mean(sp):.4f}x, min {min(sp):.4f}x, "
            f"max {max(sp):.4f}x; per class (TTFT) {per_app}{guard}")


def main(argv: Optional[list[str]] = None) -> int:
    p = OneLineParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--trace", required=True, help="PBKV trace (pbkv-bench synth / pbkv-sdk record or import)")
    p.add_argument("--policies", default=DEFAULT_POLICY, help="comma-separated policies, each against lru")
    p.add_argument("--profile", default="h100-qwen2.5-32b", help="hardware profile (pbkv-bench profiles)")
    p.add_argument("--concurrency", type=int, default=16, help="workflows in flight")
    p.add_argument("--device", type=int, required=True, help="device KV tokens of the cell")
    p.add_argument("--host-ratio", type=float, default=1.0, help="host tier / device")
    p.add_argument("--predictor", default=DEFAULT_ONLINE_PREDICTOR, help="next-agent predictor")
    p.add_argument("--offsets", default=",".join(map(str, OFFSETS)),
                   help="comma-separated offsets, in steps (write --offsets=-8,0,8: a leading minus reads as an option)")
    p.add_argument("--step", type=int, default=1, help="tokens per offset")
    p.add_argument("--hints", action=argparse.BooleanOptionalAction, default=True,
                   help="--no-hints: replay as a client without the SDK sends the trace (no hints, session, "
                        "priority or TTL)")
    p.add_argument("--json", type=Path, default=None, help="write every size's figures here")
    args = p.parse_args(argv)
    try:
        policies = parse_policy_list(args.policies, REPLAY, "--policies")
        offsets = _offsets(args.offsets)
        profile = get_profile(args.profile)
    except (ValueError, KeyError) as exc:
        p.error(str(exc).strip("'\""))
    if BASELINE_POLICY in policies:
        p.error(f"--policies: {BASELINE_POLICY} is the baseline every policy is compared with")
    if args.concurrency < 1:
        p.error(f"--concurrency {args.concurrency}: must be >= 1")
    if not 0 <= args.host_ratio <= MAX_HOST_RATIO:  # nan fails both
        p.error(f"--host-ratio {args.host_ratio}: must be in [0, {MAX_HOST_RATIO:g}]")
    if args.step < 1:
        p.error(f"--step {args.step}: must be >= 1")
    if args.device + min(offsets) * args.step < 1:
        p.error(f"--device {args.device} with offset {min(offsets)} x step {args.step}: every swept device "
                f"must be at least 1 token")
    check_output(p, args.json, [args.trace], json_doc=is_sweep_result)
    try:
        records = read_trace(args.trace)
        make_predictor(args.predictor, 3, [])
        result = sweep(records, policies, profile, args.concurrency, args.device, args.host_ratio, args.predictor,
                       offsets, args.step, args.hints)
    except (OSError, ValueError, ImportError, SimulationError) as exc:
        p.error(str(exc))
    for policy, rows in result.items():
        print(summary_line(policy, rows))
    if args.json:
        write_json(args.json, result)
    return 0


def is_sweep_result(document: Any) -> bool:
    """Whether a JSON document is an earlier ``--json`` of this script (:func:`sweep`'s
    ``{policy: [{"device", "speedup", "per_app", "fallback"}, ...]}``): ``--json`` replaces only
    that, not a ``pbkv-bench advise`` or ``replay`` result."""
    return isinstance(document, dict) and all(
        isinstance(rows, list) and all(isinstance(r, dict) and SWEEP_ROW_KEYS <= r.keys() for r in rows)
        for rows in document.values())


#: The keys of every row :func:`sweep` writes.
SWEEP_ROW_KEYS = frozenset({"device", "speedup", "per_app", "fallback"})


def _offsets(text: str) -> list[int]:
    """``--offsets``' whole numbers of steps; a repeat (``0,0``, ``8,+8``) is refused, not swept twice."""
    offsets = [_offset(item, text) for item in list_items(text, "--offsets", "offset")]
    repeated = sorted({k for k in offsets if offsets.count(k) > 1})
    if repeated:
        raise ValueError(f"--offsets {text!r}: {', '.join(map(str, repeated))} given more than once")
    return offsets


def _offset(item: str, text: str) -> int:
    try:
        return int(item)
    except ValueError:
        raise ValueError(f"--offsets {text!r}: {item!r} is not a whole number of steps") from None


if __name__ == "__main__":
    sys.exit(run_script(main))
