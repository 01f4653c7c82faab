"""The examples' sizes (issue 25 item 1): one source of truth, read by app and scenario, shown in the docs.

* docs/example-sizes.md is what ``scripts/make_example_sizes.py`` renders from the ``sizes`` modules;
* the HoVer app runs with the default convention and retrieval depth its ``sizes`` module names;
* the scenario's reply parts and the synthesised passages have the lengths the configured
  distributions give, the expectation computed here from the parameters alone (a log-normal's
  mean is ``median * exp(sigma**2 / 2)``; a passage is a title sentence plus a uniform number of
  section sentences), not by calling the code that draws them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import random
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("make_example_sizes", REPO / "scripts" / "make_example_sizes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_docs_page_is_the_rendered_sizes_modules() -> None:
    script = _script()
    page = script.PAGE.read_text(encoding="utf-8")
    assert script.render(page) == page, "docs/example-sizes.md is stale: run scripts/make_example_sizes.py"
    assert script.main(["--check"]) == 0
    # every example's every size is a row of its table
    for name in script.EXAMPLES:
        for size in importlib.import_module(f"examples.{name}.sizes").SIZES:
            assert f"| `{size.name}` | {size.shown()} |" in page


def test_docs_table_follows_a_changed_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from examples.common.sizes import Size
    from examples.hover_langchain import sizes as S

    script = _script()
    page = script.PAGE.read_text(encoding="utf-8")
    changed = tuple(Size(s.name, 7, s.unit, s.what, s.source) if s.name == "PASSAGES_PER_QUERY" else s
                    for s in S.SIZES)
    monkeypatch.setattr(S, "SIZES", changed)
    assert "| `PASSAGES_PER_QUERY` | 7 passages |" in script.render(page)


def test_every_size_names_a_source_or_says_none_was_found() -> None:
    from examples.common.sizes import NOT_FOUND, SAME_AS

    for name in _script().EXAMPLES:
        sizes = importlib.import_module(f"examples.{name}.sizes").SIZES
        for i, size in enumerate(sizes):
            if size.source.startswith(SAME_AS):
                # the row it refers to comes first
                assert any(f"`{s.name}`" in size.source for s in sizes[:i]), size.name
                continue
            assert size.source.startswith(NOT_FOUND) or "http" in size.source or "app's" in size.source, size.name


def test_hover_default_is_the_shared_history_with_the_configured_retrieval_depth(fixture_data: Path) -> None:
    """A graph built without ``messages`` extends one prefix call after call, and each query
    returns ``PASSAGES_PER_QUERY`` passages (the fixture index holds enough matching titles)."""
    from .test_hover_messages import _recording_model

    from examples.hover_langchain import prompts as P
    from examples.hover_langchain import scenario as _  # noqa: F401  (registers "hover")
    from examples.hover_langchain import sizes as S
    from examples.hover_langchain.app import build_graph
    from examples.hover_langchain.data import load_hover
    from examples.hover_langchain.retrieval import build_index

    assert P.CONVENTIONS[0] == S.DEFAULT_MESSAGES == P.SHARED
    claims = load_hover()
    model = _recording_model()
    graph = build_graph(model, build_index(claims), claims[:2])
    claim = next(c for c in claims if c.num_hops == 3)
    asyncio.run(graph.ainvoke({"claim": claim}))
    calls = model.calls
    for (_, before), (_, after) in zip(calls, calls[1:]):
        assert after[:len(before)] == before
    summarizer_inputs = [m[-1]["content"] for a, m in calls if a == P.SUMMARIZER]
    query_replies = [calls[i + 1][1][-2]["content"] for i, (a, _) in enumerate(calls[:-1]) if a == P.QUERY_WRITER]
    for queries, passages in zip(query_replies, summarizer_inputs):
        n_queries = sum(line.startswith(f"{P.QUERY_LABEL}:") for line in queries.splitlines())
        n_passages = sum(line.startswith("[") for line in passages.splitlines())
        assert n_passages <= S.PASSAGES_PER_QUERY * n_queries
    assert max(sum(line.startswith("[") for line in p.splitlines()) for p in summarizer_inputs) >= S.PASSAGES_PER_QUERY


def _lognormal_mean(median: float, sigma: float) -> float:
    return median * math.exp(sigma ** 2 / 2)


def _hover_request(agent: str, claim, last: str):
    from pbkv_server.scenarios.base import ScenarioRequest

    messages = [{"role": "system", "content": "x"}, {"role": "user", "content": f"Claim: {claim.claim}"},
                {"role": "user", "content": last}]
    return ScenarioRequest(app="hover", agent=agent, workflow_id="w", step=1, messages=messages)


@pytest.fixture
def one_claim(monkeypatch: pytest.MonkeyPatch):
    """A claim the HoVer scenario recognises, without a data set."""
    from examples.hover_langchain import scenario as hov
    from examples.hover_langchain.data import HoverClaim

    claim = HoverClaim("u1", "The director of Alpha Film was born in Beta Town.", ("Alpha Film", "Beta Town", "Gamma"),
                       "SUPPORTED", 3)
    monkeypatch.setattr(hov, "_claims_by_text", lambda: {claim.claim: claim})
    return claim


def test_hover_reply_parts_have_the_configured_mean_length(one_claim) -> None:
    """Summary notes (one per passage) and query-writer reasoning: mean words (one word per token
    of ``prose``) within 3% of the configured log-normal's mean, over 4,000 draws each."""
    from examples.hover_langchain import prompts as P
    from examples.hover_langchain import sizes as S
    from examples.hover_langchain.scenario import HoverScenario

    scenario, rng = HoverScenario(), random.Random(7)
    passages = "Passages:\n" + "\n".join(f"[Title {i}] text" for i in range(8))
    notes = []
    for _ in range(500):
        reply = scenario.reply(_hover_request(P.SUMMARIZER, one_claim, passages), rng)
        notes += [len(line.split("]: ", 1)[1].split()) for line in reply.splitlines()]
    expected = _lognormal_mean(S.REPLY_MEDIAN["summary_note"], S.REPLY_SIGMA)
    assert len(notes) == 4000 and abs(statistics.mean(notes) / expected - 1) < 0.03

    reasoning = []
    for _ in range(4000):
        reply = scenario.reply(_hover_request(P.QUERY_WRITER, one_claim, "Notes so far:\n(no notes yet)"), rng)
        reasoning.append(len(reply.splitlines()[0].split()))
    expected = _lognormal_mean(S.REPLY_MEDIAN["query_reasoning"], S.REPLY_SIGMA)
    assert abs(statistics.mean(reasoning) / expected - 1) < 0.03


def test_hover_reply_lengths_follow_a_changed_median(one_claim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario reads the median from ``sizes`` (doubling it doubles the notes)."""
    from examples.hover_langchain import prompts as P
    from examples.hover_langchain import scenario as hov
    from examples.hover_langchain import sizes as S

    def mean_note_words() -> float:
        rng, words = random.Random(3), []
        for _ in range(300):
            reply = hov.HoverScenario().reply(_hover_request(P.SUMMARIZER, one_claim, "Passages:\n[T] x"), rng)
            words.append(len(reply.split("]: ", 1)[1].split()))
        return statistics.mean(words)

    base = mean_note_words()
    monkeypatch.setitem(hov.REPLY_MEDIAN, "summary_note", 2 * S.REPLY_MEDIAN["summary_note"])
    assert abs(mean_note_words() / base - 2) < 0.05


def test_synthesised_passages_have_the_configured_mean_length(fixture_data: Path) -> None:
    """Mean passage tokens within 10% of a title sentence plus the mean section count times a
    section sentence's tokens, both counted here on the sentence shapes with fixed years."""
    from examples.hover_langchain.data import load_hover
    from examples.hover_langchain.retrieval import synthesise_passage
    from examples.hover_langchain.sizes import PASSAGE_SECTIONS
    from pbkv_server.scenarios.tokenizer import count_tokens

    titles = sorted({t for c in load_hover() for t in c.titles})
    measured = statistics.mean(count_tokens(synthesise_passage(t).text) for t in titles)
    lo, hi = PASSAGE_SECTIONS
    per_title = []
    for t in titles:
        head = count_tokens(f"{t} is the subject of an encyclopedia article.")
        section = count_tokens(f"The career of {t} is documented from 1950, with sources dated 1960.")
        per_title.append(head + (lo + hi) / 2 * section)
    assert abs(measured / statistics.mean(per_title) - 1) < 0.10


def test_swe_and_finance_scenarios_read_their_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other two scenarios take their medians from their ``sizes`` modules too: a request
    they cannot place gets a reply whose length follows the configured median."""
    from examples.finance_crewai import scenario as fin
    from examples.finance_crewai import sizes as FS
    from examples.swe_autogen import scenario as swe
    from examples.swe_autogen import sizes as SS
    from pbkv_server.scenarios.base import ScenarioRequest

    assert fin.MEDIAN_TOKENS is FS.MEDIAN_TOKENS
    request = ScenarioRequest(app="swe", agent=None, workflow_id=None, step=0,
                              messages=[{"role": "user", "content": "fix the parser please"}])

    def mean_words() -> float:
        rng = random.Random(5)
        return statistics.mean(len(swe.SweScenario().reply(request, rng).split()) for _ in range(300))

    base = mean_words()
    assert abs(base / _lognormal_mean(SS.REPLY_MEDIAN["unknown_request"], SS.REPLY_SIGMA) - 1) < 0.05
    monkeypatch.setitem(SS.REPLY_MEDIAN, "unknown_request", 4 * SS.REPLY_MEDIAN["unknown_request"])
    assert abs(mean_words() / base - 4) < 0.2
