"""The policy registry describes every policy, and every list of policies is derived from it.

A toy policy registered here (one class plus ``@register_policy``, no other file touched) must
show up in ``pbkv-bench`` (listing, default replay set, ``--policy``), in ``pbkv-server``
(``--policy``), in the SGLang launcher's policy mapping and in the examples' replay set. A scan of
the sources checks that no policy name is written outside the registry's own package.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pbkv_server.cli.bench import app as bench_app
from pbkv_server.engine.policies import (
    REPLAY, SERVER, SGLANG, Policy, available_policies, policy_info, register_policy, resolve_policy_name,
    sglang_policy_names, unregister_policy,
)

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


class _ToyPolicy(Policy):
    """Toy: evict the node with the most tokens first (largest-first), LRU among equals."""

    summary = "toy policy of the registry tests"
    sglang_name = "pbkv-toy"

    def priority(self, node) -> tuple:
        return (-node.tokens, node.last_access)


@pytest.fixture
def toy():
    register_policy("toy")(_ToyPolicy)
    yield "toy"
    unregister_policy("toy")


def test_builtin_declarations():
    he, pbkv, belady, kvflow, lru = (policy_info(n) for n in ("he", "pbkv", "belady", "kvflow", "lru"))
    assert he.predictive and not he.prefetches and he.sglang_name == "pbkv-he"
    assert pbkv.predictive and pbkv.prefetches and pbkv.sglang_name == "pbkv"
    assert pbkv.backends == {REPLAY, SERVER, SGLANG}
    assert belady.offline and belady.backends == {REPLAY} and belady.sglang_name is None
    assert kvflow.uses_app_graph and kvflow.prefetches and not kvflow.predictive and SGLANG not in kvflow.backends
    assert not lru.predictive and not lru.offline and lru.backends == {REPLAY, SERVER}
    assert available_policies(SERVER) == [p for p in available_policies()
                                          if p not in ("opt", "belady", "opt-device", "opt-host", "opt-ref",
                                                       "pbkv-nextuse")]
    nextuse = policy_info("pbkv-nextuse")  # pbkv with an oracle of next-call times: replay only
    assert nextuse.offline and not nextuse.iterates_order and nextuse.predictive and nextuse.sglang_name is None
    for hybrid in ("opt-device", "opt-host", "opt-ref"):  # replay-only references, as opt
        assert policy_info(hybrid).offline and policy_info(hybrid).backends == {REPLAY}
    opt = policy_info("opt")
    assert opt.offline and opt.iterates_order and opt.backends == {REPLAY}
    assert sglang_policy_names() == {"pbkv-lae": "lae", "pbkv-he": "he", "pbkv-paper": "pbkv-paper", "pbkv": "pbkv"}
    # what users run today: online, on replay and the server, not plugin strategies (they need hooks)
    for name in ("sglang-session", "sglang-priority", "ttl-pin", "continuum", "spec-prefill", "kvflow-shipped", "tlru",
                 "slru"):
        info = policy_info(name)
        assert info.backends == {REPLAY, SERVER} and not info.predictive and info.sglang_name is None, name
        assert info.speculative_prefill == (name == "spec-prefill"), name
    shipped = policy_info("kvflow-shipped")
    assert shipped.uses_app_graph and shipped.prefetches
    assert resolve_policy_name("pbkv-he") == "he" and policy_info("pbkv-lae").name == "lae"


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown policy 'nope'; available: lru, lae"):
        policy_info("nope")


def test_a_name_cannot_be_registered_twice_by_another_class(toy):
    class Other(_ToyPolicy):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register_policy("toy")(Other)
    with pytest.raises(ValueError, match="SGLang policy name 'pbkv-toy' is already used"):
        register_policy("toy2")(Other)


@pytest.mark.slow
def test_toy_policy_runs_in_pbkv_bench(toy, tmp_path, monkeypatch):
    from rich.console import Console

    from pbkv_server.cli import bench

    # A console built at import takes its width from the terminal of that moment (80 columns
    # where there is none, as on a pytest-xdist worker), not from COLUMNS set for this call.
    monkeypatch.setattr(bench, "console", Console(width=200))
    listing = runner.invoke(bench_app, ["policies"])
    assert listing.exit_code == 0 and "toy policy of the registry tests" in listing.output
    trace = tmp_path / "t.jsonl"
    assert runner.invoke(bench_app, ["synth", "--workflows", "6", "--seed", "1", "--out", str(trace)]).exit_code == 0
    out = tmp_path / "r.json"
    result = runner.invoke(bench_app, ["replay", str(trace), "--predictor", "markov", "--concurrency", "2",
                                       "--device-tokens", "60000", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "toy" in json.loads(out.read_text())  # part of the default replay set
    only = runner.invoke(bench_app, ["replay", str(trace), "--policy", "toy", "--concurrency", "2",
                                     "--device-tokens", "60000", "--json", str(out)])
    assert only.exit_code == 0 and list(json.loads(out.read_text())) == ["toy"]


def test_toy_policy_is_a_server_policy(toy):
    from pbkv_server.cli.server import ServeSettings
    from pbkv_server.http.service import engine_config_from

    config = ServeSettings(policy="toy", predictors=[], idle_retire_s=0)
    assert engine_config_from(config).policy == "toy"
    assert config.predictors == {}  # not predictive: no predictor is built for it


def test_offline_policy_is_refused_by_the_server():
    from pbkv_server.cli.server import ServeSettings
    from pbkv_server.http.service import engine_config_from

    with pytest.raises(ValueError, match="'belady'.*simulator only"):
        engine_config_from(ServeSettings(policy="belady", predictors=[], idle_retire_s=0))


def test_toy_policy_reaches_the_sglang_launcher_and_the_examples(toy):
    from examples.common.pipeline import replay_policies
    from pbkv_server.backends.sglang.launch import LaunchError, resolve_policy

    assert resolve_policy("toy") == ("pbkv-toy", True)
    assert resolve_policy("pbkv-toy") == ("pbkv-toy", True)
    assert resolve_policy("lru") == ("lru", False)  # SGLang's own lru
    assert resolve_policy("lfu") == ("lfu", False)  # an SGLang built-in we do not register
    with pytest.raises(LaunchError, match="simulator"):
        resolve_policy("kvflow")
    assert "toy" in replay_policies() and replay_policies()[-1] == "opt"
    assert "opt" not in replay_policies(reference=False) and "belady" not in replay_policies()


# --------------------------------------------------------------------------- no hard-coded names

#: Module-level constants whose value happens to equal a policy name but names something else.
NOT_POLICY_NAMES = {"BODY_KEY", "PLUGIN_NAME", "CACHE_POLICY_NAME", "BACKEND_NAME", "MODEL_OWNER", "CACHE_DIR_NAME"}
SCANNED = ("pbkv_server", "predictor", "examples", "benchmarks", "scripts", "pbkv_contract", "pbkv_sdk")
REGISTRY_PACKAGE = ROOT / "pbkv_server" / "engine" / "policies"
#: The registry's name constants, kept outside the package so that importing them loads no policy.
REGISTRY_NAMES = ROOT / "pbkv_server" / "engine" / "policy_names.py"


def _hard_coded_names(path: Path, names: set[str], root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))  # docstrings
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in NOT_POLICY_NAMES
                                                for t in node.targets):
            skip.add(id(node.value))
    return [f"{path.relative_to(root)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in skip]


def test_no_policy_name_is_hard_coded_outside_the_registry():
    names = set(available_policies()) | set(sglang_policy_names())
    offenders = [hit for package in SCANNED for path in sorted((ROOT / package).rglob("*.py"))
                 if REGISTRY_PACKAGE not in path.parents and path != REGISTRY_NAMES
                 for hit in _hard_coded_names(path, names)]
    assert not offenders, "policy names belong to the registry (engine/policies):\n" + "\n".join(offenders)


def test_the_scan_finds_a_hard_coded_name(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('"""Doc: lru."""\nBODY_KEY = "pbkv"\nx = ["he", "lru"]\n')
    hits = _hard_coded_names(probe, {"he", "lru", "pbkv"}, root=tmp_path)
    assert [h.split(": ")[1] for h in hits] == ["'he'", "'lru'"]
