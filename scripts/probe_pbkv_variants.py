"""Diagnostic: replay ``pbkv`` with one rule swapped, to locate where its capture goes (replay only).

Registers variant policies in this process, then runs ``pbkv-bench replay`` with the given
arguments (so every ``replay`` option works; ``--policy`` may name the variants):

- ``pbkv-nosel``: ``pbkv`` without rule 4 (every device victim is written to the host, as ``lru``);
- ``pbkv-nopf``: ``pbkv`` without prefetch;
- ``pbkv-minhost``: ``pbkv`` whose host drop order is MIN (the true next use of a host node's last
  unit, as ``opt`` ranks the host; offline, iterated to its own order as ``opt``): what the host
  order can give with ``pbkv``'s device order, prefetch and rule 4 left as they are;
- ``pbkv-minhost-nosel``: the same without rule 4;
- ``pbkv-noq``: ``pbkv`` without its two queue-aware rules: rule 3's cycle without the app's mean
  admission wait ``W`` (``PBKVPolicy.queue_wait_cycle``), and a prefetch round while requests wait
  for admission (``PBKVPolicy.prefetch_while_queued``): ``pbkv`` as before them;
- ``pbkv-qwonly``: the admission wait in the cycle, prefetching while queued;
- ``pbkv-pfonly``: no prefetch round while queued, the cycle without the wait.

Usage::

    PYTHONPATH=. python scripts/probe_pbkv_variants.py TRACE --policy lru,pbkv,pbkv-minhost,opt \\
        --profile h100-qwen2.5-32b --concurrency 16 --device-tokens 40000 --host-ratio 1 --json out.json

``--trace-guard`` (first argument) prints each switch of the LRU guard to stderr: the prompt
tokens admitted so far, the window's size in prompts and tokens, its saved tokens against the
ghost's, the credit left and the hold.

Not product code: the variants exist only while this script runs.
"""

from __future__ import annotations

import math
import sys

from pbkv_server.engine.policies.base import register_policy
from pbkv_server.engine.policies.pbkv import PBKVPolicy


@register_policy("pbkv-nosel")
class NoSelective(PBKVPolicy):
    summary = "probe: pbkv without selective host (rule 4)"
    sglang_name = None
    selective_host = False


@register_policy("pbkv-nopf")
class NoPrefetch(PBKVPolicy):
    summary = "probe: pbkv without prefetch"
    sglang_name = None

    def prefetch_plan(self, seconds: float):
        return None


class _MinHost(PBKVPolicy):
    """``pbkv`` with MIN as the host drop order (retired and never-used cache first)."""

    sglang_name = None
    offline = True
    iterates_order = True

    def __init__(self, context) -> None:
        super().__init__(context)
        if context.future is None:
            raise ValueError("needs EngineConfig.future (replay only)")
        self._future = context.future
        self._index = -1

    def on_admit(self, admission, path) -> None:
        self._index = admission.index
        super().on_admit(admission, path)

    def host_priority(self, node) -> tuple:
        nxt = self._future.next_use(node.keys[-1], self._index)
        return (1, -nxt, node.last_access) if nxt != math.inf else (0, 0.0, node.last_access)


@register_policy("pbkv-minhost")
class MinHost(_MinHost):
    summary = "probe: pbkv with MIN as its host drop order (offline)"


@register_policy("pbkv-minhost-nosel")
class MinHostNoSel(_MinHost):
    summary = "probe: pbkv with MIN host order and no selective host (offline)"
    selective_host = False


@register_policy("pbkv-noq")
class NoQueue(PBKVPolicy):
    summary = "probe: pbkv without the admission wait in its cycle, prefetching while queued"
    sglang_name = None
    queue_wait_cycle = False
    prefetch_while_queued = True


@register_policy("pbkv-qwonly")
class WaitOnly(PBKVPolicy):
    summary = "probe: pbkv with the admission wait in its cycle, prefetching while queued"
    sglang_name = None
    prefetch_while_queued = True


@register_policy("pbkv-pfonly")
class PrefetchOnly(PBKVPolicy):
    summary = "probe: pbkv without the admission wait in its cycle, no prefetch while queued"
    sglang_name = None
    queue_wait_cycle = False


def trace_guard() -> None:
    """Print every switch of :class:`~pbkv_server.engine.guard.LRUGuard` to stderr."""
    from pbkv_server.engine import guard

    observe, switch = guard.LRUGuard.observe, guard.LRUGuard._switch

    def counted(self, cls, keys, toks, room, prompt, *a, **k):
        self._probe_seen = getattr(self, "_probe_seen", 0) + prompt
        return observe(self, cls, keys, toks, room, prompt, *a, **k)

    def logged(self, fallback: bool) -> None:
        seen = getattr(self, "_probe_seen", 0)
        if fallback:
            real = sum(s[1] for s in self._sums.values())
            ghost = sum(s[2] for s in self._sums.values())
            print(f"guard: LRU fallback after {seen} prompt tokens; window {len(self._window)} prompts, "
                  f"{self._total} tokens, saved {real:.0f} vs ghost {ghost:.0f}, credit "
                  f"{self._credit.get(guard._ALL, 0.0):.0f}, hold {self._hold_windows} windows "
                  f"({self._hold_windows * self.window_tokens} prompt tokens)", file=sys.stderr)
        else:
            print(f"guard: predicted order again after {seen} prompt tokens", file=sys.stderr)
        switch(self, fallback)

    guard.LRUGuard.observe, guard.LRUGuard._switch = counted, logged


if __name__ == "__main__":
    from pbkv_server.cli.bench import app

    args = sys.argv[1:]
    if args[:1] == ["--trace-guard"]:
        trace_guard()
        args = args[1:]
    sys.exit(app(["replay", *args], standalone_mode=True))
