"""Write docs/results.md (and README's results block) from the runs' JSON, so no result is typed by hand.

Inputs:
  * the examples' ``--json`` summaries (``python -m examples.<name> --json runs/<name>.json``):
    ``{"example", "quick", "messages", "profile", "setup", "seed", "replay_concurrency",
    "device_tokens", "host_tokens", "train_tasks", "test_tasks", "policies": {name: {...}},
    "comparison": {name: {...}}}`` (``examples/common/pipeline.py``, ``examples/common/results.py``);
  * the sensitivity studies under ``docs/study/*/``: ``report.md`` as ``pbkv-bench study`` wrote it
    (its ``Command:`` line and its ``## Summary`` table are copied, nothing recomputed).

Output: ``docs/results.md``, stamped with the git commit of this checkout and, per table, the
command that produced it; and the block between ``<!-- results:begin -->`` and
``<!-- results:end -->`` in README.md (one row per example run). Units: latencies in simulated
engine seconds, hit rates token level.

Usage (one command, after the example runs)::

    .venv/bin/python scripts/make_results.py            # runs/*.json, docs/study/*/report.md
    .venv/bin/python scripts/make_results.py --check    # exit 1 if docs/results.md or README is stale

Bad input (no summary found, a file that is not an example summary) is one ``make_results: ...``
line and exit status 2; nothing is written then.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
#: Display names of the examples (module name -> data set + framework).
TITLES = {"hover_langchain": "HoVer + LangGraph", "swe_autogen": "SWE-bench Lite + AutoGen",
          "finance_crewai": "FinanceBench + CrewAI"}
#: The examples' CLI defaults (examples/common/cli.py); a setting equal to its default is left out
#: of the reconstructed command.
DEFAULTS = {"profile": "a6000-qwen3-14b", "setup": "paper", "seed": 0}
#: Default message convention per example (the first of ExampleSpec.message_conventions).
DEFAULT_MESSAGES = {"hover_langchain": "shared"}
sys.path.insert(0, str(ROOT))
from pbkv_server.engine.policies import BASELINE_POLICY as BASELINE  # noqa: E402
from pbkv_server.engine.policies import DEFAULT_POLICY as PREDICTIVE  # noqa: E402
from pbkv_server.sim.measures import CAPTURE_NOTE, SPEEDUP_HEADER  # noqa: E402


class InputError(Exception):
    """An input the script cannot use; the message is the one line printed."""


def git_stamp(root: Path) -> str:
    """``<short commit>`` of ``root``, with ``+ uncommitted changes`` when the tree is dirty."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()
    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit (not a git checkout)"
    return commit + (" + uncommitted changes" if dirty else "")


def load_summary(path: Path) -> dict:
    """One example summary; :class:`InputError` when it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or not {"example", "policies", "comparison"} <= set(data):
        raise InputError(f"{path}: not an example --json summary (needs 'example', 'policies', 'comparison')")
    if BASELINE not in data["policies"]:
        raise InputError(f"{path}: no '{BASELINE}' row, the baseline every ratio needs")
    return data


def command_of(s: dict, path: Path) -> str:
    """The example command that writes this summary, rebuilt from the settings it records."""
    parts = [".venv/bin/python -m examples." + s["example"]]
    if s.get("quick"):
        parts.append("--quick")
    msgs = s.get("messages")
    if msgs and msgs != DEFAULT_MESSAGES.get(s["example"], msgs):
        parts.append(f"--messages {msgs}")
    for key, flag in (("profile", "--profile"), ("setup", "--setup"), ("seed", "--seed")):
        if key in s and s[key] != DEFAULTS[key]:
            parts.append(f"{flag} {s[key]}")
    parts.append(f"--json {path.as_posix()}")
    return " ".join(parts)


def run_label(s: dict) -> str:
    """``HoVer + LangGraph, per-agent, C=72`` style label of one run."""
    label = TITLES.get(s["example"], s["example"])
    if s.get("messages"):
        label += f", {s['messages']}"
    if s.get("quick"):
        label += ", quick"
    return label + f", C={s.get('replay_concurrency', '?')}"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def ratio(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.2f}x"


def example_table(s: dict) -> list[str]:
    """Markdown rows: one per policy, in the summary's order."""
    rows = ["| policy | mean latency s | p99 latency s | mean TTFT s | device hit | host hit | prefill saved "
            f"| {SPEEDUP_HEADER} | latency capture | hit x LRU | device-hit gap to opt, points |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in s["policies"].items():
        c = s["comparison"].get(name, {})
        gap, saved, capture = c.get("hit_rate_gap_to_ref"), c.get("prefill_saved"), c.get("latency_capture")
        rows.append(f"| {name} | {r['mean_latency_s']:.1f} | {r['p99_latency_s']:.1f} | {r['mean_ttft_s']:.2f} "
                    f"| {pct(r['hit_rate'])} | {pct(r['host_hit_rate'])} | {'-' if saved is None else pct(saved)} "
                    f"| {ratio(c.get('latency_speedup', 1.0))} | {'-' if capture is None else f'{capture:.2f}'} "
                    f"| {ratio(c.get('hit_rate_ratio', 1.0))} | {'-' if gap is None else f'{100 * gap:.1f}'} |")
    return rows


def serving_table(s: dict) -> list[str]:
    """Markdown rows of the serving figures in SGLang ``bench_serving``'s names (simulated ms), one
    per policy, from each policy's ``extra`` (``pbkv_server.sim.serving_metrics``); empty for a
    summary written before they existed."""
    policies = {name: r.get("extra") or {} for name, r in s["policies"].items()}
    if not any("p99_ttft_ms" in e for e in policies.values()):
        return []
    rows = ["Serving figures (names of SGLang `bench_serving`; simulated ms; ceiling = an infinite cache's hit rate "
            "on the same trace):", "",
            "| policy | median_ttft_ms | p90_ttft_ms | p99_ttft_ms | mean_tpot_ms | p99_tpot_ms | p99_itl_ms "
            "| p99_e2e_latency_ms | request_throughput | dev+host hit / ceiling |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, e in policies.items():
        r = s["policies"][name]
        ceiling = e.get("hit_rate_ceiling")
        hit = r["hit_rate"] + r["host_hit_rate"]
        rows.append(f"| {name} | " + " | ".join(_ms(e.get(k)) for k in (
            "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "p99_itl_ms",
            "p99_e2e_latency_ms"))
            + f" | {_num(e.get('request_throughput'), 3)} | {pct(hit)} / "
              f"{'-' if ceiling is None else pct(ceiling)} |")
    return rows + [""]


def _ms(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def _num(x, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def readme_rows(runs: list[tuple[Path, dict]]) -> list[str]:
    """README's short table: LRU against ``pbkv`` per run."""
    rows = [f"| run | LRU device hit | `pbkv` device hit | hit x LRU | {SPEEDUP_HEADER} |", "|---|---:|---:|---:|---:|"]
    for _, s in runs:
        lru = s["policies"][BASELINE]
        pb = s["policies"].get(PREDICTIVE)
        c = s["comparison"].get(PREDICTIVE, {})
        if pb is None:
            rows.append(f"| {run_label(s)} | {pct(lru['hit_rate'])} | - | - | - |")
            continue
        rows.append(f"| {run_label(s)} | {pct(lru['hit_rate'])} | {pct(pb['hit_rate'])} "
                    f"| {ratio(c['hit_rate_ratio'])} | {ratio(c['latency_speedup'])} |")
    return rows


def study_section(report: Path, root: Path) -> list[str]:
    """The study's command and summary table, copied from its generated report.md."""
    text = report.read_text()
    cmd = re.search(r"^Command: (.*)$", text, re.M)
    summary = re.search(r"^## Summary\n(.*?)(?=^## )", text, re.M | re.S)
    rel = report.relative_to(root / "docs").as_posix()
    out = [f"### {report.parent.name}", ""]
    out.append(f"Command (from [{rel}]({rel})): {cmd.group(1) if cmd else 'not recorded in the report'}")
    out.append("")
    if summary:
        out += [ln for ln in summary.group(1).strip().splitlines()]
    else:
        out.append(f"(no summary table in {rel})")
    return out + [""]


def render(runs: list[tuple[Path, dict]], reports: list[Path], root: Path, stamp: str) -> str:
    lines = ["# Results (generated)", "",
             f"Generated by `.venv/bin/python scripts/make_results.py` at commit {stamp}. Do not edit by hand: "
             "rerun the script after the runs (see [contributing](contributing.md#results-are-generated)). All "
             "timings are simulated engine seconds under the run's hardware profile; hit rates are token level; "
             "`x LRU` ratios compare with `lru` in the same replay (above 1 is better: speedup = LRU latency / the "
             f"policy's); {CAPTURE_NOTE}. The measured record with "
             "its discussion, including runs this page does not regenerate, is in "
             "[results-analysis.md](results-analysis.md).", "", "## Example runs", ""]
    for path, s in runs:
        lines += [f"### {run_label(s)}", "",
                  f"Command: `{command_of(s, path)}` (rebuilt from the settings in `{path.as_posix()}`).",
                  "",
                  f"Setup: profile `{s.get('profile')}`, setup `{s.get('setup')}`, device {s.get('device_tokens'):,} tokens, "
                  f"host {s.get('host_tokens'):,} tokens, replay concurrency {s.get('replay_concurrency')}, "
                  f"{s.get('train_tasks')} training and {s.get('test_tasks')} test tasks.", ""]
        lines += example_table(s) + [""] + serving_table(s)
    if reports:
        lines += ["## Sensitivity studies", "",
                  "Each table is the summary `pbkv-bench study` wrote into its report; the report links every figure.", ""]
        for rep in reports:
            lines += study_section(rep, root)
    return "\n".join(lines).rstrip() + "\n"


def replace_block(text: str, block: str) -> str:
    """``text`` with the lines between the README markers replaced by ``block``."""
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise InputError(f"README has no '{BEGIN}' ... '{END}' block")
    return text[: i + len(BEGIN)] + "\n" + block + text[j:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="*", type=Path, help="example --json summaries (default: runs/*.json)")
    ap.add_argument("--studies", type=Path, default=ROOT / "docs/study", help="folder of study reports")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/results.md")
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if an output would change")
    args = ap.parse_args(argv)
    try:
        paths = args.runs if args.runs else sorted((ROOT / "runs").glob("*.json"))
        runs = []
        for p in paths:
            s = load_summary(p)
            runs.append((p.resolve().relative_to(ROOT) if p.resolve().is_relative_to(ROOT) else p, s))
        if not runs:
            raise InputError("no example summary found (run e.g. .venv/bin/python -m examples.hover_langchain "
                             "--json runs/hover_langchain.json first)")
        reports = sorted(args.studies.glob("*/report.md")) if args.studies.is_dir() else []
        doc = render(runs, reports, ROOT, git_stamp(ROOT))
        block = "\n".join(readme_rows(runs)) + "\n\nFull tables, commands and commit: [docs/results.md](docs/results.md).\n"
        readme = replace_block(args.readme.read_text(), block)
    except InputError as exc:
        print(f"make_results: {exc}", file=sys.stderr)
        return 2
    if args.check:
        old_doc = args.out.read_text() if args.out.exists() else ""
        # the commit stamp changes with every commit: compare everything else
        strip = lambda t: re.sub(r"at commit [^.]*\.", "", t)  # noqa: E731
        stale = [str(p) for p, new, old in ((args.out, doc, old_doc), (args.readme, readme, args.readme.read_text()))
                 if strip(new) != strip(old)]
        if stale:
            print(f"make_results: stale: {', '.join(stale)}; rerun scripts/make_results.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(doc)
    args.readme.write_text(readme)
    print(f"wrote {args.out} ({len(runs)} runs, {len(reports)} studies) and the results block of {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
