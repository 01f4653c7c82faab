"""``scripts/decompose_opt.py``'s capture columns, by hand (issue 33: the next-use-time oracle row)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _script():
    spec = importlib.util.spec_from_file_location("decompose_opt", ROOT / "scripts" / "decompose_opt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(latencies: dict[str, float]) -> dict[str, dict]:
    return {name: {"mean_latency_s": lat} for name, lat in latencies.items()}


def test_captures_without_the_hybrids():
    d = _script()
    # opt gains 40 s over lru's 100 s: pbkv 10/40, the oracle next agent 15/40, the next-use oracle 30/40
    sh = d.split(_rows({d.LRU: 100.0, d.PBKV: 90.0, d.ORACLE: 85.0, d.NEXTUSE: 70.0, d.OPT: 60.0}))
    assert sh == {"gain": 0.4, "device": None, "host": None, "order": None, "online": 0.25, "oracle": 0.375,
                  "nextuse": 0.75}


def test_shares_with_the_hybrids():
    d = _script()
    # device order alone 80, host order alone 90, both (opt) 60, opt-ref 70: device ((100-80)+(90-60))/2/40
    sh = d.split(_rows({d.LRU: 100.0, d.PBKV: 90.0, d.ORACLE: 85.0, d.OPT: 60.0, d.DEVICE: 80.0, d.HOST: 90.0,
                        d.ORDER: 70.0}))
    assert (sh["device"], sh["host"], sh["order"], sh["nextuse"]) == (0.625, 0.375, 0.25, None)
