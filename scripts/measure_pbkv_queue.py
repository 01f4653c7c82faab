"""Measurement harness: ``pbkv`` with each of its two queue-aware changes on or off (replay only).

The changes: rule 3's cycle with the app's mean admission wait (``PBKVPolicy.queue_wait_cycle``)
and no prefetch round while requests wait for admission (unless a growing conversation's does)
(``PBKVPolicy.prefetch_while_queued``). Registers in this process:

- ``pbkv-noq``: ``pbkv`` with neither change (``pbkv`` as before them);
- ``pbkv-qwonly``: the admission wait in the cycle, prefetch as before;
- ``pbkv-pfonly``: no prefetch while queued, cycle as before;

then runs ``pbkv-bench replay`` with the arguments.

Usage::

    PYTHONPATH=. python scripts/measure_pbkv_queue.py TRACE --policy pbkv-qwonly ...

Not product code: the variants exist only while this script runs.
"""

from __future__ import annotations

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

    sys.exit(app(["replay", *sys.argv[1:]], standalone_mode=True))
