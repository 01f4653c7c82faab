"""Measurement harness: ``pbkv`` with each of its three queue-aware changes on or off (replay only).

The changes (this branch): the LRU guard's window of at least ``WINDOW_PROMPTS`` prompts
(:mod:`pbkv_server.engine.guard`), rule 3's cycle with the app's mean admission wait
(``PBKVPolicy.queue_wait_cycle``) and no prefetch round while requests wait for admission (unless a
growing conversation's does)
(``PBKVPolicy.prefetch_while_queued``). Registers in this process:

- ``pbkv-noq``: ``pbkv`` with neither policy change (only the guard's window, if any);
- ``pbkv-qwonly``: the admission wait in the cycle, prefetch as before;
- ``pbkv-pfonly``: no prefetch while queued, cycle as before;

then runs ``pbkv-bench replay`` with the remaining arguments. ``--guard-prompts N`` (first
argument) sets the guard's least window in prompts for every policy of the run (1: the window
before this change, one device capacity of prompt tokens).

Usage::

    PYTHONPATH=. python scripts/measure_pbkv_queue.py --guard-prompts 1 TRACE --policy pbkv-qwonly ...

Not product code: the variants exist only while this script runs.
"""

from __future__ import annotations

import functools
import sys

from pbkv_server.engine.policies.base import register_policy
from pbkv_server.engine.policies.pbkv import PBKVPolicy


@register_policy("pbkv-noq")
class NoQueue(PBKVPolicy):
    summary = "measure: pbkv without the admission wait in its cycle, prefetching while queued"
    sglang_name = None
    queue_wait_cycle = False
    prefetch_while_queued = True


@register_policy("pbkv-qwonly")
class WaitOnly(PBKVPolicy):
    summary = "measure: pbkv with the admission wait in its cycle, prefetching while queued"
    sglang_name = None
    prefetch_while_queued = True


@register_policy("pbkv-pfonly")
class PrefetchOnly(PBKVPolicy):
    summary = "measure: pbkv without the admission wait in its cycle, no prefetch while queued"
    sglang_name = None
    queue_wait_cycle = False


if __name__ == "__main__":
    from pbkv_server.cli.bench import app
    from pbkv_server.engine import cache, guard

    args = sys.argv[1:]
    if args[:1] == ["--guard-prompts"]:
        cache.LRUGuard = functools.partial(guard.LRUGuard, window_prompts=int(args[1]))
        args = args[2:]
    sys.exit(app(["replay", *args], standalone_mode=True))
