"""Measured figures in the docs come from generated blocks, never typed prose (issue 32).

A *figure* is a number in prose that reads like a measurement: one with a decimal point
(``1.47``), a thousands separator (``1,209``), a percent sign (``73.5%``), an ``x`` or ``×`` speedup
(``1.05x``), a time unit (``66 s``, ``25 ms``, ``4 min``, ``2 minutes``) or points (``5.8 points``,
``-0.3 pt``). Bare integers (``C = 72``, ``300 test claims``, block size 64) are settings, not
figures. Not prose, so never scanned: fenced code blocks, inline code spans (commands, option
values), link targets and bare URLs, HTML comments, and whatever lies between a generator's
``<!-- name:begin -->`` and ``<!-- name:end -->`` markers (``scripts/make_results.py``,
``scripts/make_regime_docs.py``, ``scripts/make_example_sizes.py``) or in a page a generator writes
whole (:data:`GENERATED_PAGES`).

What may stay in prose is a *constant*, listed with its reason: a version number after the
product it versions (:data:`VERSIONED`), and per page the settings, defaults, published figures
with their citation and rules of the house (:data:`CONSTANTS`). Anything else is a measured
figure typed by hand: move it into a generated block, link to the generated page, or delete it.

:data:`STILL_TYPED` is the debt left when this rule came in: pages whose measured tables and
prose have no generator yet, each with the number of figures it still types. The test fails when
a page types more, and when it types fewer (lower the number, so the debt only shrinks).
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Pages a generator writes whole (glob -> generator). Their figures come from runs.
GENERATED_PAGES: dict[str, str] = {
    "docs/results.md": "scripts/make_results.py",
    "docs/study/*/report.md": "pbkv-bench study (pbkv_server/sim/study/report.py)",
}

#: A version after the name of what it versions ("torch 2.13.0", "vLLM 0.33.0", "arXiv 2605.06472"),
#: and a section of a cited paper or standard ("Section 4.1", "§3.2", "RFC 9110, 5.5"), HTTP/1.1.
VERSIONED = re.compile(r"(?:\b(?:torch|vLLM|SGLang|SMG|SDK|Python|CPython|Apache-|arXiv|version|v|Section"
                       r"|HTTP/|RFC \d+,)\s?|§\s?)"
                       r"\d+(?:\.\d+)+\b")

#: page -> {figure as the scan reads it: why it is a constant, not a measurement}.
CONSTANTS: dict[str, dict[str, str]] = {
    "README.md": {},
    "docs/benchmarks.md": {
        "0.44 ms": "PBKV paper Table 4 target", "0.64 ms": "PBKV paper Table 4 target",
        "60 s": "benchmarks/sim_speed.py's target", "5 us": "PBKV paper Table 4 target",
    },
    "docs/compared-policies.md": {
        "2510.15152": "arXiv id of the T-LRU paper", "1 s": "T-LRU's TTFT budget, a setting",
        "3600 s": "ttl-pin's TTL clamp (SGLang PR #18941)", "0.6": "ttl-pin's share of the host tier",
        "2 s": "Continuum's pin time and tool-duration limit", "300 s": "the replay's cache TTL (Dynamo's \"5m\")",
        "1x": "the paper setup's host tier: 1x device", "2x": "the chat replay's setting: host tier 2x device",
        "96,092": "the a6000-qwen3-14b profile's device KV tokens (docs/design/cost-model.md)",
    },
    "docs/coding-agent-workload.md": {
        **dict.fromkeys(["301,026", "1,189,581", "9,310,255", "7,767,261", "8,681,190", "631.4", "4.91", "540.95",
                         "631,401,670,144", "4,914,633,421", "540,950,119,440", "3.95", "7.83", "6.53", "1.118",
                         "527.9", "9.31"],
                        "the release's published statistics (DATASET_CARD.md), cited in Sources"),
        **dict.fromkeys(["0.956", "6.83", "2,000", "12,000", "4,000", "30,000", "128,000", "8,000", "0.3", "30 s",
                         "6.5 s", "600 s", "4,096", "1,024", "0.8 %"],
                        "the generator's parameters and their arithmetic (pbkv_server/sim/synth/coding.py)"),
        "10 %": "test_synth_coding.py's tolerance",
    },
    "docs/cost-model.md": {
        '0.14': "SGLang's SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR default",
        '0.7': "SGLang's SGLANG_INIT_NEW_TOKEN_RATIO default",
        **dict.fromkeys(['116.8', '16,384', '2.25', '3.3', '3.35', '30.5', '32.8', '4.8', '5.1', '60.8', '70.6',
                         '8,192'], "a model's config.json or a GPU datasheet value, cited in its table row"),
        '15%': 'the calibration target the page states (issue 34)',
        '73%': 'FlashAttention-2 published efficiency (arXiv 2307.08691)',
        '75%': 'FlashAttention-3 published efficiency (arXiv 2407.08608)',
    },
    "docs/design/cost-model.md": {
        "0.88": "derive_profile: usable share of GPU memory", "0.45": "derive_profile: prefill MFU",
        "0.9": "derive_profile: TP efficiency", "0.8": "derive_profile: HBM bandwidth efficiency",
        "0.78": "derive_profile: PCIe efficiency", "12.34 ms": "PBKV paper Table 4's decode step",
        "15%": "calibration's reporting threshold (pbkv_server/sim/calibration.py)",
    },
    "docs/results-analysis.md": {
        "96,092": "the a6000-qwen3-14b profile's device KV tokens", "1x": "the paper setup's host tier",
        "2x": "--setup trace's host tier", "0.6": "ttl-pin's share of the host tier",
        "1.24x": "KVFlow's published speedup (arXiv 2507.07400, Section 4.1)",
        "1.42x": "KVFlow's published speedup over GPU-only LRU (same section)",
        "12.34 ms": "PBKV paper Table 4's decode step", "80%": "the profiles' assumed HBM efficiency",
        "78%": "the profiles' assumed PCIe efficiency", "1.85x": "PBKV paper's HoVer latency gain",
        "2.55x": "PBKV paper's HoVer hit-rate gain", "1.26x": "PBKV paper's FinanceBench latency gain over KVFlow",
        "1.39x": "PBKV paper's FinanceBench hit-rate gain over KVFlow", "10.90 s": "PBKV paper Table 1's LRU TTFT",
    },
    "docs/routers.md": {
        "30 s": "SMG's worker check interval default", "10 s": "REPLICA_COOLDOWN_S (pbkv_sdk/routing.py)",
        "2x": "the setting: host tier 2x device", "30%": "SMG's cache_threshold", "0.3": "SMG's cache_threshold",
        "1.5": "SMG's spill gate factor",
    },
    "docs/sglang-plugin.md": {"8,192": "the tiny test model's vocabulary (config)",
                               "4,096": "SGLang's --chunked-prefill-size default"},
    "docs/server.md": {
        "1x": "the paper setup's host tier", "3600 s": "ttl-pin's TTL clamp", "300 s": "ttl-pin's TTL clamp, lower end",
        "0.8": "ToolSettings.call_probability default", "0.2": "ToolSettings.after_result_probability default",
        "0.1": "the hint protocol's version", "10%": "server_soak.py's abandoned share",
        "60 s": "server_soak.py's idle retirement", "600 s": "ServerConfig's idle retirement default",
    },
    "docs/simulator-and-studies.md": {
        "0.7": "the score's default decay gamma", "1%": "the robustness guard's threshold",
        "0.5%": "MIN_DIFFERENCE (pbkv_server/sim/measures.py)", "0.5 %": "MIN_DIFFERENCE",
        "1.03x": "advise.MIN_SPEEDUP", "1.0": "the speedup bars' origin (LRU)",
        "2x": "SGLang HiCache's default host ratio", "10,000": "the driver's step limit without progress",
        "300 s": "the replay's cache TTL (Dynamo's \"5m\")",
    },
    "docs/design/offline-reference.md": {
        "1,000": "a test's input size (random traces)", "0.95": "the random search's host value (a setting)",
        "1x": "a cell's setting: host tier 1x device", "1 %": "decompose_opt's no-split threshold",
        "60 s": "the cc40 cells' import setting: gap cap", "128,000": "the cc40 cells' import setting: context limit",
    },
    "docs/design/engine.md": {
        "10%": "the guard's class-share threshold (guard.py)", "1%": "the guard's trailing threshold (guard.py)",
        "2x": "a benchmark setting: host tier 2x device", "0.05": "a tried CREDIT_SHARE / the plugin's round interval",
        "0.5": "CREDIT_SHARE (guard.py) / the worked example's probabilities",
        "1.0": "WINDOW_CAPACITIES and a tried CREDIT_SHARE (guard.py)", "0.7": "default decay gamma",
        "0.1": "defaults: rho, dropout", "1x": "a benchmark setting: host tier 1x device",
        "100,000": "defaults: max_ended, max_active_workflows",
        **dict.fromkeys(["0.6", "0.4"], "the worked example's probabilities"),
        **dict.fromkeys(["0.81", "0.21", "1.02"], "the worked example's arithmetic"),
        "1 s": "the step window before a gap is seen", "0.05 s": "the plugin's prefetch round interval",
        **dict.fromkeys(["0.8", "0.2"], "the step-time moving average's weight"),
    },
    "docs/design/memory-short-policy.md": {
        "0.05": "LOW_SCORE (pbkv.py)", "1x": "a cell's setting: host tier 1x device",
        "2x": "a cell's setting: host tier 2x device", "0.7": "issue 24's capture target",
        "1%": "the guard's margin", "0.25": "a regime cell's f", "0.5": "a regime cell's f",
        "0.1 ms": "the eviction mean target", "1 ms": "the eviction p99 target",
        "5%": "the regime study's star rule (opt >= 1.05x LRU)", "0.75": "the cells' selection threshold",
    },
    "docs/getting-started.md": {
        "0.1 s": "the examples' nominal timing rule (examples/common/nominal.py)",
        "4,000": "the examples' nominal timing rule: prefill tokens per second",
        "25 ms": "the examples' nominal timing rule: per output token",
        "0.05": "the nominal tool-gap range, lower end", "0.3 s": "the nominal tool-gap range, upper end",
        "0.5": "a setting's default (--pressure; the nominal search-tool gap, lower end)",
        "3 s": "the nominal search-tool gap, upper end",
        "1x": "the paper setup's host tier: 1x device",
    },
    "docs/contributing.md": {
        "30 s": "the tests' polling deadline and HTTP timeout, a rule of the house",
        "0.5 s": "the SDK's end budget per phase, default ($PBKV_END_TIMEOUT_S)",
        "1,000": "a test's input size (random traces)", "10,000": "a test's input size (cache operations)",
        "5 s": "the house rule: a test over 5 s is marked slow",
        "3 minutes": "the fast lane's target on the 2-core machine (issue 32)",
    },
    "docs/integrations.md": {"0.5 s": "$PBKV_END_TIMEOUT_S default", "60 s": "$PBKV_END_TIMEOUT_S upper bound"},
    "docs/vllm-backend.md": {"0.7": "PBKV_VLLM_CONFIG default gamma"},
    "docs/importing-real-traces.md": {
        "1,563": "arithmetic: 100k tokens / 64-token blocks", "0.5": "--warm-prefix-pct default"},
    "docs/design/metrics.md": {"200,000": "deque length (LATENCY_METRICS)", "10,000": "window length, samples"},
    "docs/design/protocol.md": {"0.0": "the field's value when unknown"},
    "docs/when-pbkv-helps.md": {
        **dict.fromkeys(["0.25", "0.5", "0.75", "1.5"], "the study's grid of f"),
        "1x": "the study's host ratios (the paper's HiCache setup)",
        "2x": "the study's host ratios and concurrency multiplier (SGLang's default host ratio)",
        "5%": "the study's star rule: opt >= 1.05x LRU", "3%": "advise.MIN_SPEEDUP",
    },
}


#: page -> figures it still types with no generator (issue 32's debt; only ever lowered).
STILL_TYPED: dict[str, int] = {}

_FENCE = re.compile(r"^\s*(```|~~~)")
_BEGIN = re.compile(r"<!--\s*([\w.:-]+):begin\s*-->")
_END = re.compile(r"<!--\s*([\w.:-]+):end\s*-->")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_COMMENT = re.compile(r"<!--.*?-->")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_URL = re.compile(r"https?://\S+")
#: Two dots or more: an address or a version ("127.0.0.1", "3.11.7"), not a figure.
_DOTTED = re.compile(r"(?<![\w.])\d+(?:\.\d+){2,}(?!\.?\w)")
_NUMBER = r"(?<![\w.,])[-+−]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
#: A speedup's x is written on the number ("1.05x"); "2 × layers" is a formula, not a figure.
_ATTACHED = r"%|×|x\b"
_UNIT = r"%|ms\b|µs\b|us\b|s\b|min\b|minutes?\b|seconds?\b|hours?\b|h\b|pt\b|points?\b"
_FIGURE = re.compile(rf"{_NUMBER}(?:{_ATTACHED}|\s?(?:{_UNIT}))?")


def figures_of_line(line: str) -> list[str]:
    """The figures of one prose line, as written (``"1.47x"``, ``"66 s"``, ``"1,209"``)."""
    line = _COMMENT.sub(" ", _CODE_SPAN.sub(" ", line))
    line = _URL.sub(" ", _LINK_TARGET.sub("]", line))
    line = _DOTTED.sub(" ", VERSIONED.sub(" ", line))
    out = []
    for m in _FIGURE.finditer(line):
        text = m.group(0)
        number = re.match(_NUMBER, text).group(0)
        if "." in number or "," in number or text != number:
            out.append(text)
    return out


def figures(text: str) -> list[tuple[int, str]]:
    """``(line number, figure)`` of a Markdown text, outside code and generated blocks."""
    found, fence, block = [], None, None
    for no, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if m:
            fence = m.group(1) if fence is None else (None if m.group(1) == fence else fence)
            continue
        if fence is not None:
            continue
        markers = _CODE_SPAN.sub(" ", line)  # a marker quoted in a code span opens no block
        if block is not None:
            end = _END.search(markers)
            if end and end.group(1) == block:
                block = None
            continue
        begin = _BEGIN.search(markers)
        if begin:
            block = begin.group(1)
            continue
        found += [(no, f) for f in figures_of_line(line)]
    return found


def pages(root: Path = ROOT) -> list[str]:
    """README.md and docs/**/*.md, relative to ``root``, less the generated pages."""
    generated = {p for pattern in GENERATED_PAGES for p in root.glob(pattern)}
    return [str(p.relative_to(root)) for p in [root / "README.md", *sorted(root.glob("docs/**/*.md"))]
            if p.is_file() and p not in generated]


def typed(page: str, root: Path = ROOT) -> list[tuple[int, str]]:
    """The measured figures ``page`` types: its figures less its listed constants."""
    allowed = CONSTANTS.get(page, {})
    return [(no, f) for no, f in figures((root / page).read_text(encoding="utf-8")) if f not in allowed]


@pytest.mark.parametrize("page", pages())
def test_no_page_types_a_measured_figure(page):
    found = typed(page)
    debt = STILL_TYPED.get(page, 0)
    where = "\n".join(f"{page}:{no}: {f}" for no, f in found)
    assert len(found) <= debt, (
        f"{page} types {len(found)} measured figures outside generated blocks (allowed {debt}): put them in a "
        f"generated block, link to the generated page, or list a constant in CONSTANTS with its reason:\n{where}")
    assert len(found) == debt, f"{page} types {len(found)} figures now: lower STILL_TYPED[{page!r}] to {len(found)}"


def test_the_lists_name_pages_that_exist_and_constants_that_occur():
    for page, allowed in CONSTANTS.items():
        assert (ROOT / page).is_file(), page
        present = Counter(f for _, f in figures((ROOT / page).read_text(encoding="utf-8")))
        gone = [f for f in allowed if f not in present]
        assert not gone, f"{page}: CONSTANTS lists {gone}, which the page no longer has; remove them"
    assert all((ROOT / page).is_file() for page in STILL_TYPED)
    assert all(list(ROOT.glob(pattern)) for pattern in GENERATED_PAGES)


@pytest.mark.parametrize(("line", "expected"), [
    ("the main job took 66 s after setup", ["66 s"]),
    ("PBKV gains most (1.47x in latency), 73.5% device hits, 1,209 tests in 2 min 29 s",
     ["1.47x", "73.5%", "1,209", "2 min", "29 s"]),
    ("a gap of -0.3 pt and 5.8 points; 1.5-4 minutes; hit rate .3179", ["-0.3 pt", "5.8 points", "1.5", "4 minutes",
                                                                        ".3179"]),
    # settings and commands are not figures: integers, code spans, link targets, versions, comments
    ("C = 72, 300 test claims, block size 64, issue 32, 2 × layers", []),
    ("run `pytest -n 3 --durations=40` or `--host-ratio 1.5`", []),
    ("see [the run](runs/v1.2/report.md) and https://arxiv.org/abs/2605.06472 on 127.0.0.1", []),
    ("torch 2.13.0 and vLLM 0.33.0, Python 3.11 <!-- 1.5x -->, KVFlow Section 4.1", []),
])
def test_what_counts_as_a_figure(line, expected):
    assert figures_of_line(line) == expected


def test_code_and_generated_blocks_are_not_prose():
    text = ("typed 1.05x\n```bash\nrun --ratio 2.5\n```\n<!-- results:begin -->\n| a | 73.5% |\n"
            "<!-- results:end -->\nafter 12.5 s\n")
    assert figures(text) == [(1, "1.05x"), (8, "12.5 s")]
    # a marker quoted in prose (a code span) is not a block: what follows is still scanned
    quoted = "blocks between `<!-- results:begin -->` and `<!-- results:end -->`\nit took 66 s\n"
    assert figures(quoted) == [(2, "66 s")]


def test_a_typed_figure_fails_the_page(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("The job takes 66 s.\n")
    (tmp_path / "docs" / "results.md").write_text("| 1.47x |\n")  # generated whole: not scanned
    assert pages(tmp_path) == ["README.md"]
    assert typed("README.md", tmp_path) == [(1, "66 s")]


def test_policy_docstrings_point_to_the_docs_instead_of_quoting_speedups():
    # A speedup in a docstring goes stale as silently as one in prose (pbkv.py once quoted
    # synth-research's); the policies say where the figure is generated instead.
    speedup = re.compile(r"\d\.\d+\s?(?:x\b|×|%)")
    found = [f"{path.relative_to(ROOT)}:{no}: {line.strip()}"
             for path in sorted((ROOT / "pbkv_server/engine/policies").rglob("*.py"))
             for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if speedup.search(line)]
    assert not found, "\n".join(found)
