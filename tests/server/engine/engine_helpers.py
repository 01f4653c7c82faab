"""Shared fixtures for the engine-core tests: a round-number hardware profile, chained block keys,
and predictors that return fixed distributions."""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

from pbkv_contract.hints import END_AGENT, Hints
from pbkv_server.engine import Engine, EngineConfig, EngineRequest, HardwareProfile
from pbkv_contract.prediction import Prediction, PredictionQuery, Predictor

#: Round numbers so timings can be worked out by hand: prefill 1000 tok/s, decode step
#: 0.01 s + 0.001 s per sequence, 1000 bytes/token over a 1e6 B/s link (load = 1 ms per token).
PROFILE = HardwareProfile(
    name="test", description="hand-checkable test profile", source="round numbers for tests",
    prefill_tokens_per_s=1000.0, decode_base_s=0.01, decode_per_seq_s=0.001,
    pcie_bytes_per_s=1e6, kv_bytes_per_token=1000, device_kv_tokens=1000, host_kv_tokens=0,
)


def chain(labels: Iterable[object]) -> list[str]:
    """Chained block keys of a sequence of block contents (key i identifies blocks 0..i)."""
    out, h = [], b""
    for label in labels:
        h = hashlib.blake2b(h + repr(label).encode(), digest_size=8).digest()
        out.append(h.hex())
    return out


def request(rid: str, labels: Sequence[object], tokens_per_block: int = 10, output: int = 1,
            hints: Hints | None = None) -> EngineRequest:
    """An :class:`EngineRequest` whose blocks are ``chain(labels)``, each ``tokens_per_block`` tokens."""
    keys = chain(labels)
    return EngineRequest(rid, keys, [tokens_per_block] * len(keys), output, hints)


def make_engine(policy: str = "lru", device: int = 1000, host: int = 0, **kw) -> Engine:
    """An engine on :data:`PROFILE` with the given capacities (tokens)."""
    return Engine(EngineConfig(profile=PROFILE, policy=policy, device_tokens=device, host_tokens=host, **kw))


def run(engine: Engine, until: float | None = None) -> list:
    """Step until idle; returns all events."""
    events = []
    while engine.busy:
        events.extend(engine.step(until))
    return events


def device_keys(engine: Engine) -> set[str]:
    """Block keys currently cached on the device tier."""
    return {k for n in engine.cache.tree.nodes() if n.tier == 0 for k in n.keys}


def host_keys(engine: Engine) -> set[str]:
    """Block keys currently cached on the host tier."""
    return {k for n in engine.cache.tree.nodes() if n.tier == 1 for k in n.keys}


class TablePredictor(Predictor):
    """Returns, for every query of workflow ``w``, ``table[w]`` (K dists), or END-certain if absent."""

    horizon = 3

    def __init__(self, table: dict[str, list[dict[str, float]]] | None = None) -> None:
        self.table = dict(table or {})
        self.observed: list[PredictionQuery] = []
        self.ended: list[str] = []

    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        return [Prediction([dict(d) for d in self.table.get(q.workflow_id, [{END_AGENT: 1.0}] * 3)])
                for q in queries]

    def observe(self, query: PredictionQuery) -> None:
        self.observed.append(query)

    def workflow_ended(self, app, workflow_id, status="completed") -> None:
        self.ended.append(workflow_id)


def replay_victims(records, monkeypatch, device: int, host: int, patches: Iterable[tuple] = ()) -> tuple[dict, list]:
    """A ``pbkv`` replay of trace ``records`` (h100-qwen2.5-32b, C = 8, the context predictor)
    with ``device``/``host`` tokens and each ``(owner, name, value)`` of ``patches`` set
    meanwhile: its summary (but its wall-clock latencies) and its victims in order, each
    ``(keys, tokens, tier)`` as it leaves its tier. Two replays that decide alike give equal
    pairs, so a fast path is checked against the general one by patching one of them out."""
    from pbkv_server.engine.eviction import Eviction
    from pbkv_server.hardware.profiles import get_profile
    from pbkv_server.predictors import make_predictor
    from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate

    victims: list = []
    evict = Eviction._evict

    def recorded(self, node):
        victims.append((tuple(node.keys), node.tokens, node.tier))
        return evict(self, node)

    with monkeypatch.context() as m:
        m.setattr(Eviction, "_evict", recorded)
        for owner, name, value in patches:
            m.setattr(owner, name, value)
        result = simulate(load_workload(records),
                          ReplayConfig("pbkv", get_profile("h100-qwen2.5-32b"), device_tokens=device, host_tokens=host),
                          ReplayOptions(concurrency=8, predictor=make_predictor("context", 3, records)))
    summary = dict(result.summary)
    summary.pop("latency_ms", None)
    return summary, victims
