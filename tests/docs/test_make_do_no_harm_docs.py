"""``scripts/make_do_no_harm_docs.py``: docs/do-no-harm.md's tables are rendered from
``benchmarks/do_no_harm.py``'s JSON: per cell each policy's mean and lowest speedup over the
swept sizes, pbkv's TTFT per class and guard share, and the cells below the floor."""
from __future__ import annotations

import pytest

from .scripts_loader import load_script


@pytest.fixture(scope="module")
def docs():
    return load_script("make_do_no_harm_docs")


def _rows(speedups, ttft=None, fallback=None):
    return [{"device": 40_000 + k, "speedup": s, "per_app": ttft[i] if ttft else {}, "fallback": fallback}
            for i, (k, s) in enumerate(zip((-4, 0, 4), speedups))]


def _data() -> dict:
    cells = [
        {"traffic": "chat", "graph": "chat", "hints": True, "host_ratio": 1.0, "device": 40_000,
         "policies": {"tlru": _rows([1.0, 0.996, 0.995]),
                      "pbkv": _rows([1.002, 1.004, 0.999], [{"chat": 1.01}, {"chat": 1.03}, {"chat": 1.02}], 0.5)}},
        {"traffic": "chat-mix", "graph": "chat-mix", "hints": True, "host_ratio": 0.0, "device": 80_000,
         "policies": {"tlru": _rows([1.0, 1.0, 1.0]),
                      "pbkv": _rows([1.003, 1.003, 1.003],
                                    [{"chat": 0.97, "codegen": 1.02}, {"chat": 0.98, "codegen": 1.0}, {"codegen": 1.01}],
                                    0.25)}},
        {"traffic": "codegen, no hints", "graph": "codegen", "hints": False, "host_ratio": 0.0, "device": 80_000,
         "policies": {"tlru": _rows([1.0, 1.0, 1.0]),
                      "pbkv": _rows([1.0, 1.0, 1.0], [{"codegen": 1.0}, {"codegen": 1.0}, {}], None)}},
    ]
    return {"settings": {"profile": "h100-qwen2.5-32b", "concurrency": 16, "workflows": 150, "seed": 0,
                         "predictor": "context", "offsets": [-4, 0, 4], "step": 1},
            "commit": "abc1234", "cells": cells}


def test_cells_classes_and_verdicts(docs):
    body = docs.block(_data())
    # means by hand: tlru (1.0 + 0.996 + 0.995) / 3 = 0.997, pbkv (1.002 + 1.004 + 0.999) / 3 = 1.0016...
    assert "| traffic | host | device tok | pbkv | tlru |" in body  # pbkv first, whatever the JSON's order
    assert "| chat | 1x | 40,000 | 1.0017x (0.9990x) | 0.9970x (0.9950x) |" in body
    assert "| codegen, no hints | 0x | 80,000 | 1.0000x (1.0000x) | 1.0000x (1.0000x) |" in body
    assert body.index("- pbkv:") < body.index("- tlru:")
    assert "the cell's device -4 to +4 tokens" in body
    # pbkv's chat TTFT (1.01 + 1.03 + 1.02) / 3 = 1.02; an unguarded cell shows "-"
    assert "| chat | 1x | 40,000 | chat 1.0200x | 0.50 |" in body
    assert "| codegen, no hints | 0x | 80,000 | codegen 1.0000x | - |" in body
    assert "- pbkv: lowest cell mean 1.0000x (codegen, no hints, host 0x, device 80,000; meets 0.999x); lowest " \
           "single size 0.9990x (chat, host 1x, device 40,000)." in body
    assert "- tlru: mean below 0.999x in 1 of 3 cells: chat, host 1x, device 40,000 0.9970x." in body
    # chat's TTFT over the two sizes that have it: (0.97 + 0.98) / 2 = 0.975; codegen's (1.02 + 1.0 + 1.01) / 3
    assert "| chat-mix | 0x | 80,000 | chat 0.9750x, codegen 1.0100x | 0.25 |" in body
    assert "- pbkv by class: mean TTFT below 0.999x for 1 class(es): chat in chat-mix, host 0x, device 80,000 " \
           "0.9750x." in body
    assert "commit abc1234" in body and docs.COMMAND in body
    page = "intro\n<!-- do-no-harm:begin -->\nold\n<!-- do-no-harm:end -->\ntail\n"
    out = docs.render(page, body)
    assert "old" not in out and body in out and docs.render(out, body) == out


@pytest.mark.parametrize("broken", [[], {"cells": []}, {"settings": {}, "cells": [{"traffic": "chat"}]}])
def test_another_json_is_refused(docs, broken):
    with pytest.raises(docs.InputError, match="not the JSON of benchmarks/do_no_harm.py"):
        docs.block(broken)


def test_committed_block_is_what_the_committed_json_renders(docs):
    assert docs.main(["--check"]) == 0
