"""Measures that compare a policy with LRU and the offline reference, seeing both KV tiers.

One convention per quantity, shared by ``pbkv-bench replay`` and ``study``, the examples' tables
and ``benchmarks/alternatives_table.py`` / ``policy_matrix.py``:

* **speedup vs LRU** (:func:`latency_speedup`, JSON key ``latency_speedup``): the baseline's mean
  workflow latency / the policy's, printed ``1.18x``; above 1 is faster (the PBKV paper's
  convention);
* **latency capture** (:func:`latency_capture`, ``latency_capture``): share of the
  baseline-to-reference latency gap a policy closes, ``(L_lru - L) / (L_lru - L_opt)``; 0 is
  LRU, 1 the offline reference. Latency sees both tiers (a host hit costs its load, a miss its
  prefill), which the device-hit "gap closed" does not;
* **prefill saved** (:func:`prefill_saved`, ``prefill_saved``): prompt tokens whose prefill the
  cache saved, device hits + host hits x ``host_value``, as a share of all prompt tokens.
  ``host_value`` = 1 - load time / prefill time of a token under the hardware profile, the same
  weighting the LRU guard compares policies with (:func:`pbkv_server.engine.guard.host_value`).

One rule for "no difference" (:data:`MIN_DIFFERENCE`): a difference under half a percent (half a
point of hit rate, 0.5 % of latency) says nothing. It decides when gap closed and latency capture
are undefined, when the study says a policy gains nothing, and when a replay says that no policy
can differ on its setup (:func:`no_difference_verdict`).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from pbkv_server.engine.guard import host_value

__all__ = ["MIN_DIFFERENCE", "SPEEDUP_HEADER", "CAPTURE_NOTE", "latency_speedup", "latency_capture",
           "prefill_saved", "host_value", "add_measures", "trace_block_tokens", "no_difference_verdict"]

#: Smallest difference that counts: 0.005 of device hit rate (half a point) between the baseline
#: and the reference for gap closed, and a reference at least 0.5 % faster than the baseline
#: (speedup >= 1 + this) for latency capture. Below it the ratio of two near-equal differences is
#: noise (a trace whose reuse LRU already gets).
MIN_DIFFERENCE = 0.005

#: Column name of the latency ratio in every table (the table titles or notes say the baseline).
SPEEDUP_HEADER = "speedup vs LRU (x, >1 faster)"

#: Footnote of every table with a latency-capture column.
CAPTURE_NOTE = ("latency capture = (L_lru - L) / (L_lru - L_opt): 0 = lru, 1 = opt (offline reference); "
                f"'-' when opt is not at least {100 * MIN_DIFFERENCE:g}% faster than lru")


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def latency_speedup(baseline_latency_s: float | None, latency_s: float | None) -> float | None:
    """``baseline / policy`` mean latency (> 1 = faster); ``None`` when either is missing or not positive."""
    if not _finite(baseline_latency_s, latency_s) or baseline_latency_s <= 0 or latency_s <= 0:
        return None
    return baseline_latency_s / latency_s


def latency_capture(latency_s: float | None, baseline_latency_s: float | None,
                    reference_latency_s: float | None) -> float | None:
    """``(L_base - L) / (L_base - L_ref)``: 0 = the baseline, 1 = the reference, negative = slower
    than the baseline, above 1 = faster than the reference (it is no bound on latency).

    ``None`` when a latency is missing or the reference is not at least :data:`MIN_DIFFERENCE`
    faster than the baseline (``L_base / L_ref < 1.005``: no gap to capture).
    """
    speedup = latency_speedup(baseline_latency_s, reference_latency_s)
    if speedup is None or speedup < 1 + MIN_DIFFERENCE or not _finite(latency_s):
        return None
    return (baseline_latency_s - latency_s) / (baseline_latency_s - reference_latency_s)


def prefill_saved(hit_rate: float, host_hit_rate: float, value_of_host_hit: float) -> float:
    """Share of prompt tokens whose prefill was saved: ``hit_rate + value_of_host_hit x host_hit_rate``
    (both rates are shares of the same prompt tokens; ``value_of_host_hit`` from :func:`host_value`)."""
    return hit_rate + value_of_host_hit * host_hit_rate


def add_measures(results: Mapping[str, dict[str, Any]], baseline: Mapping[str, Any] | None,
                 reference: Mapping[str, Any] | None, value_of_host_hit: float) -> None:
    """Add to each summary of ``results``, in place: ``latency_speedup`` (over ``baseline``'s mean
    latency), ``latency_capture`` (on the ``baseline``-to-``reference`` scale), ``prefill_saved``
    and the ``host_value`` it used. ``baseline`` / ``reference`` are summaries (``None``: not
    replayed, so the measure that needs it is ``None``)."""
    base_lat = (baseline or {}).get("mean_latency_s")
    ref_lat = (reference or {}).get("mean_latency_s")
    for s in results.values():
        s["latency_speedup"] = latency_speedup(base_lat, s.get("mean_latency_s"))
        s["latency_capture"] = latency_capture(s.get("mean_latency_s"), base_lat, ref_lat)
        s["prefill_saved"] = prefill_saved(s["hit_rate"], s["host_hit_rate"], value_of_host_hit)
        s["host_value"] = value_of_host_hit


def trace_block_tokens(records: Iterable[Any], page_size: int | None = None) -> int:
    """``F``, the trace's footprint: tokens of the distinct prompt blocks of its invocations (each
    block counted once, as the cache holds it once): what a device must hold so that nothing is
    ever evicted (outputs aside). Not the reusable working set ``W`` of
    :mod:`pbkv_server.sim.capacity` (the blocks live workflows reuse at a concurrency), which
    ``advise`` and the examples print.

    With ``page_size`` (replay ``--page-size``) the cache units are whole pages
    (:func:`pbkv_server.engine.pages.to_units`): a page is keyed by the block holding its last
    token, so a block that starts at token ``a`` and ends at ``b`` of its prompt closes
    ``b // P - a // P`` pages, and F is ``P`` times the pages of the distinct blocks. A prompt's
    tokens after its last whole page are never cached and not counted (0 when no prompt fills a
    page)."""
    seen: dict[str, int] = {}
    for rec in records:
        hashes = getattr(rec, "prefix_hashes", None)
        if hashes is None:
            continue
        start = 0
        for key, n in zip(hashes, rec.tokens_per_block()):
            # a chained key is always at the same place of its prompt: its first sighting counts
            end = start + n
            seen.setdefault(key, n if page_size is None else (end // page_size - start // page_size) * page_size)
            start = end
    return sum(seen.values())


def no_difference_verdict(summaries: Mapping[str, Mapping[str, Any]], baseline: str, working_set_tokens: int,
                          device_tokens: int, host_tokens: int, largest_request_tokens: int = 1,
                          page_size: int | None = None) -> str | None:
    """One line saying why a replay cannot show a difference between policies, or ``None`` if it can.

    Args:
        summaries: every replayed policy's summary (the listed ones and those replayed for the
            scale), each with ``hit_rate``, ``mean_latency_s`` and ``evictions``.
        baseline: the baseline policy's name (its summary must be in ``summaries`` for a verdict).
        working_set_tokens: ``F`` of :func:`trace_block_tokens` (the trace's distinct prompt blocks).
        device_tokens, host_tokens: the capacities replayed.
        largest_request_tokens: the trace's largest request, prompt + output
            (:func:`~pbkv_server.sim.capacity.largest_request`): a smaller device it suggests
            still serves it (a replay refuses a device below it), or it suggests none.
        page_size: the replay's page size (``None``: the trace's blocks are the cache units);
            ``working_set_tokens`` must then count whole pages (``trace_block_tokens(records,
            page_size)``). When it is 0, no prompt fills one page and the line says so: nothing
            was cached, which is why nothing was evicted.

    A line is given only when no replayed policy differs from the baseline by
    :data:`MIN_DIFFERENCE` or more in device hit rate (points) or mean latency (relative): a
    policy that changes what is prefilled (``spec-prefill``) differs even where nothing is
    evicted. It then says why, in order: the baseline evicted nothing from the device (the trace
    fits in device memory, so no eviction order can differ); the trace fits in device + host
    memory (every block LRU evicts is loaded back from the host); or neither.
    """
    base = summaries.get(baseline)
    if base is None:
        return None
    for name, s in summaries.items():
        if name == baseline:
            continue
        speedup = latency_speedup(base.get("mean_latency_s"), s.get("mean_latency_s"))
        if abs(s["hit_rate"] - base["hit_rate"]) >= MIN_DIFFERENCE or (
                speedup is not None and abs(speedup - 1) >= MIN_DIFFERENCE):
            return None
    w, half = working_set_tokens, _smaller_device(working_set_tokens // 2, device_tokens, largest_request_tokens)
    units = "blocks" if page_size is None else f"pages (--page-size {page_size})"
    if page_size is not None and w == 0:
        return (f"nothing is cached: no prompt fills one page of {page_size} tok (only whole pages are cached, as "
                "in SGLang), so every policy prefills every prompt; give a smaller --page-size")
    if base.get("evictions") == 0:
        return (f"the trace fits in device memory (distinct prompt {units} F = {w} tok, device {device_tokens} tok; "
                f"{baseline} evicted nothing): no eviction order can differ"
                + (f"; try --device-tokens {half}" if half else
                   f", and no smaller device holds its largest request ({largest_request_tokens} tok)"))
    if len(summaries) < 2:
        return None
    same = (f"no replayed policy differs from {baseline} by {100 * MIN_DIFFERENCE:g}% or more in device hit rate "
            "or mean latency")
    if host_tokens > 0 and w <= device_tokens + host_tokens:
        # a device size whose device + host (same ratio) holds half of F
        smaller = _smaller_device(round(w / (2 * (1 + host_tokens / device_tokens))), device_tokens,
                                  largest_request_tokens)
        return (f"the trace fits in device + host memory (distinct prompt {units} F = {w} tok <= device {device_tokens} "
                f"+ host {host_tokens} tok): {same}; try --host-ratio 0"
                + (f" or --device-tokens {smaller}" if smaller else ""))
    return f"{same} on this setup (distinct prompt {units} F = {w} tok, device {device_tokens} tok, host {host_tokens} tok)"


def _smaller_device(wanted: int, device_tokens: int, largest_request_tokens: int) -> int | None:
    """A device size to suggest: ``wanted``, raised to the largest request (a replay refuses a
    device that cannot hold it); ``None`` when that is not smaller than the device replayed."""
    size = max(1, wanted, largest_request_tokens)
    return size if size < device_tokens else None
