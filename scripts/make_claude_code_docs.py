"""Write docs/claude-code-regime.md's table from policy-matrix runs on the shared Claude Code conversations.

The block between ``<!-- claude-code:begin -->`` and ``<!-- claude-code:end -->`` is rendered
from ``docs/study/claude-code/PROFILE-hHOST-MODE.json``: the ``--json`` of one
``benchmarks/policy_matrix.py`` run per hardware profile, host ratio and workflow mode (each
holds its concurrencies as cells; :data:`COMMAND` is the command). Per cell: LRU's mean
workflow latency, every online policy's speedup over LRU (``L_lru / L``), opt's, and pbkv's
latency capture ``(L_lru - L_pbkv) / (L_lru - L_opt)`` (as ``pbkv-bench replay`` defines it);
then issue 33's targets, checked in every cell where opt gains at least ``OPT_GAIN``: capture
>= ``CAPTURE_TARGET``, pbkv at least as fast as every other online policy, and pbkv >=
``SLOWER_LIMIT`` x LRU in every cell. The table is of the default online predictor's cells
(``DEFAULT_ONLINE_PREDICTOR``); where a JSON also holds the same cell under another predictor
(an earlier run, ``--predictor markov``), pbkv's speedup with it is a column of its own.

Usage::

    .venv/bin/python scripts/make_claude_code_docs.py           # rewrite the block
    .venv/bin/python scripts/make_claude_code_docs.py --check   # exit 1 if the block is stale
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from generated_blocks import replace_block, write_or_check  # noqa: E402
from pbkv_server.engine.policies import (  # noqa: E402
    BASELINE_POLICY, DEFAULT_POLICY, REAL_TRAFFIC_POLICIES, REFERENCE_POLICY, REPLAY, available_policies)
from pbkv_server.predictors.factory import DEFAULT_ONLINE_PREDICTOR  # noqa: E402
from pbkv_server.sim.measures import MIN_DIFFERENCE, latency_capture, latency_speedup  # noqa: E402
from pbkv_server.sim.study.regime import CAPTURE_TARGET, OPT_GAIN, SLOWER_LIMIT  # noqa: E402

PAGE = ROOT / "docs" / "claude-code-regime.md"
BLOCK = "claude-code"
STUDY_DIR = ROOT / "docs" / "study" / "claude-code"
#: The command that wrote each JSON (PROFILE, DEVICE, HOST, MODE filled per file).
COMMAND = ("python benchmarks/policy_matrix.py --trace cc120-MODE.jsonl --policy POLICIES --concurrency 16,32,64 "
           "--device DEVICE --host-ratio HOST --profile PROFILE --json PROFILE-hHOST-MODE.json")
#: The grid issue 33 asks for: one run (JSON) per profile, host ratio and workflow mode, each with
#: concurrency 16, 32 and 64. The block names the cells not there yet.
PROFILES = ("a6000x8-qwen3-32b-tp8", "h200x4-qwen3-235b-a22b-tp4")
HOSTS = (1.0, 0.0)
MODES = ("conversation", "turn")
CONCURRENCIES = (16, 32, 64)
#: The policies every cell replays (POLICIES of :data:`COMMAND`). policy_matrix.py writes its JSON
#: after each policy, so a run in progress (or stopped, to be ``--resume``d) holds cells that lack
#: some: those are listed as in progress, not tabled.
POLICIES = REAL_TRAFFIC_POLICIES
_NAME = re.compile(r"^(?P<profile>.+)-h(?P<host>[0-9.]+)-(?P<mode>conversation|turn)\.json$")
_KEY = re.compile(r"C=(?P<c>\d+) device=(?P<device>\d+) predictor=(?P<pred>\S+)$")


def load(directory: Path = STUDY_DIR) -> list[dict]:
    """One dict per cell: ``profile``, ``host``, ``mode``, ``concurrency``, ``device``,
    ``predictor`` and ``policies`` (policy -> figures), in file-name then concurrency order.

    Raises:
        ValueError: a file whose name or cell key is not of the form above.
    """
    cells = []
    for path in sorted(directory.glob("*.json")):
        m = _NAME.match(path.name)
        if m is None:
            raise ValueError(f"{path.name}: not PROFILE-hHOST-(conversation|turn).json")
        for key, policies in json.loads(path.read_text(encoding="utf-8")).items():
            k = _KEY.search(key)
            if k is None:
                raise ValueError(f"{path.name}: cell key {key!r} has no C=, device= and predictor=")
            cells.append({"profile": m["profile"], "host": float(m["host"]), "mode": m["mode"],
                          "concurrency": int(k["c"]), "device": int(k["device"]), "predictor": k["pred"],
                          "policies": policies})
    cells.sort(key=lambda c: (c["profile"], c["mode"], -c["host"], c["concurrency"]))
    return cells


def capture(cell: dict) -> float | None:
    """pbkv's latency capture ``(L_lru - L_pbkv) / (L_lru - L_opt)``
    (:func:`~pbkv_server.sim.measures.latency_capture`: ``None`` when opt is not at least
    ``MIN_DIFFERENCE`` faster than LRU, no gap to capture)."""
    lat = {p: f["mean_latency_s"] for p, f in cell["policies"].items()}
    return latency_capture(lat[DEFAULT_POLICY], lat[BASELINE_POLICY], lat[REFERENCE_POLICY])


def speedup(cell: dict, policy: str) -> float:
    """``L_lru / L`` of ``policy`` in ``cell`` (:func:`~pbkv_server.sim.measures.latency_speedup`)."""
    p = cell["policies"]
    return latency_speedup(p[BASELINE_POLICY]["mean_latency_s"], p[policy]["mean_latency_s"])


def block(loaded: list[dict]) -> str:
    """The block's body (markdown) for the cells of :func:`load`: the table of the cells that
    replayed every policy of :data:`POLICIES` with the default online predictor (and pbkv's
    speedup with each other predictor the JSON holds for the cell), the targets over them, and
    the grid's coverage.

    Raises:
        ValueError: no complete cell, or a cell with a policy outside :data:`POLICIES`.
    """
    others = sorted({c["predictor"] for c in loaded} - {DEFAULT_ONLINE_PREDICTOR})
    by_cell = {(c["profile"], c["host"], c["mode"], c["concurrency"], c["predictor"]): c for c in loaded}
    loaded, everything = [c for c in loaded if c["predictor"] == DEFAULT_ONLINE_PREDICTOR], loaded
    for c in loaded:
        extra = set(c["policies"]) - set(POLICIES)
        if extra:
            raise ValueError(f"{c['profile']} host {c['host']:g}x {c['mode']} C={c['concurrency']}: "
                             f"policies outside POLICIES: {', '.join(sorted(extra))}")
    cells = [c for c in loaded if set(c["policies"]) == set(POLICIES)]
    if not cells:
        raise ValueError("no policy-matrix cell that replayed every policy to render")
    policies = list(POLICIES)
    order = [*available_policies(REPLAY), DEFAULT_POLICY]  # the registry's order, pbkv last (next to opt)
    online = sorted((p for p in policies if p not in (BASELINE_POLICY, REFERENCE_POLICY)),
                    key=lambda p: (p == DEFAULT_POLICY, order.index(p) if p in order else len(order), p))
    lines = [
        f"Generated by `scripts/make_claude_code_docs.py` from `docs/study/claude-code/*.json`, each the JSON of "
        f"`{COMMAND}` (POLICIES = {','.join(policies)}; predictor {DEFAULT_ONLINE_PREDICTOR}; DEVICE = the profile's "
        "device KV tokens, host tier = HOST x device)"
        + (f"; `{DEFAULT_POLICY} {', '.join(others)}`: {DEFAULT_POLICY} with `--predictor {', '.join(others)}` in the "
           "same cell, where the JSON holds that run" if others else "") + ".", "",
        f"Speedup vs lru (L_lru / L, >1 faster); capture = (L_lru - L_{DEFAULT_POLICY}) / (L_lru - L_opt), `-` "
        f"where opt is less than {MIN_DIFFERENCE:.1%} faster than lru (no gap to capture).", "",
        "| profile | workflow | host | C | lru mean lat s | " + " | ".join(online)
        + "".join(f" | {DEFAULT_POLICY} {o}" for o in others) + " | opt | capture |",
        "|---|---|---:|---:|---:|" + "---:|" * (len(online) + len(others) + 2)]
    for c in cells:
        row = (f"| {c['profile']} | {c['mode']} | {c['host']:g}x | {c['concurrency']} | "
               f"{c['policies'][BASELINE_POLICY]['mean_latency_s']:,.0f} |")
        row += "".join(f" {speedup(c, p):.3f}x |" for p in online)
        for o in others:
            other = by_cell.get((c["profile"], c["host"], c["mode"], c["concurrency"], o), {"policies": {}})
            mine = other["policies"].get(DEFAULT_POLICY)
            row += " - |" if mine is None else \
                f" {latency_speedup(c['policies'][BASELINE_POLICY]['mean_latency_s'], mine['mean_latency_s']):.3f}x |"
        cap = capture(c)
        row += f" {speedup(c, REFERENCE_POLICY):.3f}x | {'-' if cap is None else f'{cap:.2f}'} |"
        lines.append(row)
    return "\n".join([*lines, "", *targets(cells, online), *coverage(loaded, everything)]) + "\n"


def coverage(cells: list[dict], everything: list[dict] | None = None) -> list[str]:
    """The grid's cells (:data:`PROFILES` x :data:`HOSTS` x :data:`MODES` x :data:`CONCURRENCIES`)
    that are not in the table: in progress (some policies replayed, or replayed under another
    predictor only: ``everything`` holds every predictor's cells) or not run yet."""
    done = {(c["profile"], c["host"], c["mode"], c["concurrency"]): c for c in cells}
    elsewhere = {(c["profile"], c["host"], c["mode"], c["concurrency"]): c["predictor"] for c in everything or ()
                 if c["predictor"] != DEFAULT_ONLINE_PREDICTOR}
    grid = [(p, h, m, k) for p in PROFILES for h in HOSTS for m in MODES for k in CONCURRENCIES]
    partial, missing = [], {}
    for p, h, m, k in grid:
        c = done.get((p, h, m, k))
        if c is None and (p, h, m, k) in elsewhere:
            partial.append(f"{p} host {h:g}x {m} C={k} (under {elsewhere[p, h, m, k]} only)")
        elif c is None:
            missing.setdefault(f"{p} host {h:g}x {m} C=", []).append(str(k))
        elif set(c["policies"]) != set(POLICIES):
            partial.append(f"{p} host {h:g}x {m} C={k} (lacks {', '.join(x for x in POLICIES if x not in c['policies'])})")
    complete = len(grid) - len(partial) - sum(map(len, missing.values()))
    return [f"- Cells of the grid here: {complete} of {len(grid)}"
            + (f"; in progress: {'; '.join(partial)}" if partial else "")
            + (f"; not run yet: {'; '.join(run + ', '.join(ks) for run, ks in missing.items())}." if missing else ".")]


def targets(cells: list[dict], online: list[str]) -> list[str]:
    """Issue 33's targets, each with the cells that miss it."""
    def name(c: dict) -> str:
        return f"{c['profile']} {c['mode']} host {c['host']:g}x C={c['concurrency']}"

    gain = [c for c in cells if speedup(c, REFERENCE_POLICY) >= OPT_GAIN]
    low = [f"{name(c)} ({capture(c):.2f})" for c in gain if capture(c) < CAPTURE_TARGET]
    beaten = [f"{p} at {name(c)} ({speedup(c, p) / speedup(c, DEFAULT_POLICY) - 1:+.2%})"
              for c in gain for p in online if p != DEFAULT_POLICY and speedup(c, p) > speedup(c, DEFAULT_POLICY)]
    below = [f"{name(c)} ({speedup(c, DEFAULT_POLICY):.4f}x)" for c in cells
             if speedup(c, DEFAULT_POLICY) < SLOWER_LIMIT]
    worst = min(cells, key=lambda c: speedup(c, DEFAULT_POLICY))
    return [f"- Cells where opt >= {OPT_GAIN:g}x lru: {len(gain)} of {len(cells)}.",
            f"- Capture >= {CAPTURE_TARGET:g} in those cells: {len(gain) - len(low)} of {len(gain)}"
            + (f"; below: {'; '.join(low)}." if low else "."),
            f"- Online policies faster than {DEFAULT_POLICY} in those cells: {'; '.join(beaten) or 'none'}.",
            f"- {DEFAULT_POLICY} below {SLOWER_LIMIT:g}x lru: {'; '.join(below) or 'no cell'} (worst "
            f"{speedup(worst, DEFAULT_POLICY):.4f}x at {name(worst)})."]


def render(page: str, body: str) -> str:
    """``page`` with its claude-code block replaced by ``body``."""
    return replace_block(page, BLOCK, body, str(PAGE.relative_to(ROOT)))


def main(argv: list[str] | None = None) -> int:
    return write_or_check("make_claude_code_docs", PAGE, lambda page: render(page, block(load())),
                          __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
