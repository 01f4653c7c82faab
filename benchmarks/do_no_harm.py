"""Do-no-harm: every online policy against lru on traffic PBKV has nothing to predict on.

PBKV's promise to an operator is "never slower than LRU, on agent and non-agent traffic alike".
This replays the traffic where a predictive policy has the least to go on, each at several
device sizes where memory is short, with and without a host tier:

- ``chat``: multi-turn conversations, each turn a workflow of its session (hinted, one call each);
- ``chat-mix``: those conversations and codegen agent workflows on one engine;
- ``codegen, no hints``: agent workflows sent by a client without the SDK
  (:func:`~pbkv_server.sim.plain_client.without_hints`): no workflow, session, priority or TTL.

A one-size figure on mixed traffic is partly noise (a device a few tokens larger reorders
admissions and moves ``lru`` itself by up to 0.6%: ``benchmarks/device_size_sweep.py``), so each
cell is the sweep of eleven sizes around its device, and a policy's figure is the mean speedup
over them (L_lru / L, mean workflow latency) with the lowest. Traces are synthesized here from
:data:`WORKFLOWS` and :data:`SEED`, so the command alone reproduces the JSON:

    .venv/bin/python benchmarks/do_no_harm.py --json docs/study/do-no-harm/sweep.json

``scripts/make_do_no_harm_docs.py`` tables docs/do-no-harm.md from that JSON. Bad input is one
line and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import OneLineParser, check_output, git_commit, run_script, write_json  # noqa: E402
from device_size_sweep import OFFSETS, summary_line, sweep  # noqa: E402

from pbkv_contract.trace import read_trace  # noqa: E402
from pbkv_server.engine.policies import BASELINE_POLICY, REAL_TRAFFIC_POLICIES, REFERENCE_POLICY  # noqa: E402
from pbkv_server.hardware.profiles import get_profile  # noqa: E402
from pbkv_server.predictors import DEFAULT_ONLINE_PREDICTOR  # noqa: E402
from pbkv_server.sim.synth.agents import write_trace  # noqa: E402

#: (name, synth graph, hints) of each traffic class, in the table's order.
TRAFFIC = (("chat", "chat", True), ("chat-mix", "chat-mix", True), ("codegen, no hints", "codegen", False))
#: Sessions (chat, chat-mix) or workflows (codegen) of each synthesized trace, and its seed.
WORKFLOWS, SEED = 150, 0
#: The cells' hardware and load: the do-no-harm matrix of docs/design/memory-short-policy.md.
PROFILE, CONCURRENCY = "h100-qwen2.5-32b", 16
#: Device KV tokens of each cell (each swept over :data:`OFFSETS`), and host tiers (x device).
DEVICES, HOST_RATIOS = (40_000, 80_000), (0.0, 1.0)
#: Every online policy of the real-traffic tables (the offline reference is no do-no-harm case).
POLICIES = tuple(p for p in REAL_TRAFFIC_POLICIES if p not in (BASELINE_POLICY, REFERENCE_POLICY))


def run_grid(tmp: Path, progress=print) -> dict:
    """Replay every cell; returns the JSON object (``settings``, ``commit``, ``cells``)."""
    profile = get_profile(PROFILE)
    cells = []
    for name, graph, hints in TRAFFIC:
        path = tmp / f"{graph}.jsonl"
        if not path.exists():
            write_trace(str(path), graph=graph, workflows=WORKFLOWS, seed=SEED)
        records = read_trace(path)
        for host in HOST_RATIOS:
            for device in DEVICES:
                rows = sweep(records, list(POLICIES), profile, CONCURRENCY, device, host, DEFAULT_ONLINE_PREDICTOR,
                             OFFSETS, 1, hints)
                cells.append({"traffic": name, "graph": graph, "hints": hints, "host_ratio": host,
                              "device": device, "policies": rows})
                progress(f"{name}, host {host:g}x, device {device:,}: " + summary_line(POLICIES[-1], rows[POLICIES[-1]]))
    return {"settings": {"profile": PROFILE, "concurrency": CONCURRENCY, "workflows": WORKFLOWS, "seed": SEED,
                         "predictor": DEFAULT_ONLINE_PREDICTOR, "offsets": list(OFFSETS), "step": 1},
            "commit": git_commit(), "cells": cells}


def is_grid_result(document: Any) -> bool:
    """Whether a JSON document is an earlier ``--json`` of this script (:func:`run_grid`'s
    ``{"settings", "commit", "cells"}``): ``--json`` replaces only that, not a replay or sweep result."""
    return (isinstance(document, dict) and {"settings", "commit", "cells"} <= document.keys()
            and isinstance(document["cells"], list))


def main(argv: Optional[list[str]] = None) -> int:
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, required=True, help="write the grid's figures here")
    args = p.parse_args(argv)
    check_output(p, args.json, [], json_doc=is_grid_result)  # before minutes of replays
    with tempfile.TemporaryDirectory() as tmp:
        data = run_grid(Path(tmp))
    write_json(args.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
