"""What the main job concludes with (issue 35, item 5): one summary line, and a table column that
does not call the offline reference a hit-rate bound."""

from __future__ import annotations

from rich.console import Console

from examples.common.pipeline import summary_line
from examples.common.report import results_table
from examples.common.results import PolicyResult, compare


def _result(policy: str, latency: float, hit: float) -> PolicyResult:
    return PolicyResult(policy=policy, mean_latency_s=latency, p99_latency_s=latency, mean_ttft_s=1.0,
                        ttft_by_agent={}, hit_rate=hit, host_hit_rate=0.1, makespan_s=latency)


RESULTS = [_result("lru", 287.97, 0.396), _result("lae", 274.26, 0.40), _result("pbkv", 261.8, 0.404),
           _result("sglang-session", 274.26, 0.40), _result("sglang-priority", 287.97, 0.396),
           _result("opt", 250.0, 0.401)]


def test_the_summary_names_the_live_server_the_replay_and_both_speedups():
    line = summary_line(RESULTS, "a6000-qwen3-14b", 72)
    # by hand: 287.97 / 261.8 = 1.0999..; 274.26 / 261.8 = 1.0476..
    assert line == ("summary: the app ran against pbkv-server's simulator serving LRU (a scenario wrote the replies); "
                    "the figures replay its recorded test trace in simulated time on profile a6000-qwen3-14b at "
                    "concurrency 72: pbkv 1.10x faster than LRU and 1.05x faster than SGLang's session cache "
                    "(sglang-session, the best alternative SGLang ships)")


def test_the_embedded_server_the_app_runs_against_serves_lru(monkeypatch):
    import examples.common.integration as integration
    from pbkv_server.http import runner

    seen = []

    class _Handle:
        url = "http://127.0.0.1:1"

    import contextlib

    @contextlib.contextmanager
    def fake_run_in_thread(config):
        seen.append(config)
        yield _Handle()

    monkeypatch.setattr(runner, "run_in_thread", fake_run_in_thread)
    with integration.embedded_server("hover") as url:
        assert url == _Handle.url
    assert seen[0].policy == "lru" and seen[0].predictors == {}


def test_the_table_says_how_each_policy_stands_against_opt_not_a_gap_below_a_bound():
    console = Console(width=250, record=True)
    console.print(results_table("t", RESULTS, compare(RESULTS, reference="opt")))
    text = console.export_text()
    assert "device hit vs opt" in text and "gap to opt" not in text
    pbkv_row = next(line for line in text.splitlines() if line.strip().startswith("│ pbkv"))
    assert "+0.3 pt" in pbkv_row  # pbkv 40.4% against opt's 40.1%: above it (it prefetches), said as such
    assert "opt is the latency reference, not a hit-rate bound" in " ".join(text.split())


def test_the_json_and_the_results_page_carry_the_bench_serving_figures():
    """A simulator summary's serving figures reach the example's JSON (``extra``) and the results
    page's serving table; a summary written before them gets no table."""
    import importlib.util
    from pathlib import Path

    from examples.common.integration import summary_to_result
    from examples.common.results import to_json

    summary = {"mean_latency_s": 2.0, "p99_latency_s": 3.0, "mean_ttft_s": 0.5, "hit_rate": 0.3, "host_hit_rate": 0.1,
               "timeline": [], "median_ttft_ms": 400.0, "p90_ttft_ms": 800.0, "p99_ttft_ms": 950.0,
               "mean_tpot_ms": 20.0, "p99_tpot_ms": 30.0, "p99_itl_ms": 90.0, "p99_e2e_latency_ms": 2900.0,
               "request_throughput": 1.25, "hit_rate_ceiling": 0.5, "not_a_serving_key": 1}
    result = summary_to_result("lru", summary)
    assert result.extra["p99_ttft_ms"] == 950.0 and result.extra["hit_rate_ceiling"] == 0.5
    assert "not_a_serving_key" not in result.extra
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("make_results", root / "scripts" / "make_results.py")
    make_results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_results)
    data = to_json([result], compare([result]))
    rows = make_results.serving_table(data)
    # dev+host 0.3 + 0.1 = 40.0% of a 50.0% ceiling
    assert "| lru | 400.0 | 800.0 | 950.0 | 20.0 | 30.0 | 90.0 | 2900.0 | 1.250 | 40.0% / 50.0% |" in rows
    del data["policies"]["lru"]["extra"]["p99_ttft_ms"]
    assert make_results.serving_table(data) == []
