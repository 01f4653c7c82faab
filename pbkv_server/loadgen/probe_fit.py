"""A cost model of a live server from controlled probes (issue 34, item 4), not from a replay.

``live-compare``'s measured profile (:func:`pbkv_server.loadgen.live_compare.measured_profile`)
reads the server off the replay it is compared with: its decode time per token includes other
requests' prefills, and its prefill rate comes from TTFTs that include queueing. Here every
figure comes from a probe on an otherwise idle server, in which one thing varies at a time:

* **cold prefill**: one request of ``n`` new tokens, nothing cached, one output token; its TTFT
  is fitted as ``fixed + n / rate + pair_s x n^2 / 2`` (least squares with every term >= 0
  over the sizes), the linear and attention terms of
  :class:`~pbkv_server.engine.cost.HardwareProfile` plus the server's fixed cost per request
  (HTTP, scheduling, the forward pass's own overhead): the profile's ``prefill_request_s``;
* **cached prefill**: the same prompt sent again, so only its last token is new. The cold terms
  predict ``fixed + 1 / rate + pair_s x (c + 1/2)`` for ``c`` cached tokens; what the server
  takes beyond that is fitted as ``cached_token_s x c + cached_pair_s x c^2 / 2`` (least
  squares, terms >= 0): SGLang's ``torch_native`` attention backend, on CPU, runs attention over
  the whole sequence again on every prefill, so the cached prefix's own queries are paid for
  (the ``c^2 / 2`` pairs) and its KV is gathered (the ``c`` term);
* **mixed prefill** (held out: not fitted): ``k`` new tokens after ``c`` cached ones, the shape of
  a replay's requests; the fit's worst relative error on them says whether the terms add up;
* **decode**: ``b`` requests of ``C`` prompt tokens each decoding together; the median gap
  between their output tokens is one decode step, fitted as ``base + per_seq x b + per_token x
  context`` with ``context = b x (C + tokens generated so far)``.

The probes themselves are sent by :mod:`pbkv_server.loadgen.probe` (after warm-up probes it
discards: the first requests of each size run several times slower); this module only fits.
Units: tokens and seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from pbkv_server.engine.cost import HardwareProfile

__all__ = ["PrefillProbe", "DecodeProbe", "ProbeFit", "fit_prefill", "fit_cached", "fit_decode", "fit_probes"]


@dataclass(frozen=True)
class PrefillProbe:
    """One single-request prefill on an idle server: ``new_tokens`` computed after ``cached_tokens``
    reused, ``seconds`` from sending to the first token (the median of its repeats).
    ``held_out``: a mixed probe, only checked against the fit (module docstring)."""

    new_tokens: int
    cached_tokens: int
    seconds: float
    held_out: bool = False


@dataclass(frozen=True)
class DecodeProbe:
    """One decode step: ``batch`` sequences holding ``context_tokens`` tokens of KV in all,
    ``seconds`` per step (the median gap between output tokens)."""

    batch: int
    context_tokens: int
    seconds: float


@dataclass(frozen=True)
class ProbeFit:
    """The fitted cost model.

    Attributes:
        fixed_s: the server's fixed cost per request (intercept of the cold fit).
        prefill_tokens_per_s: linear prefill rate.
        attn_pair_s: seconds per (query, key) pair of prefill attention (0 if the fit found none).
        decode_base_s, decode_per_seq_s, decode_per_token_s: the decode step's terms.
        cold_rel_err: largest relative error of the cold fit on its own probes.
        cached_token_s, cached_pair_s: what a cached token, and a pair of cached tokens, still
            cost a prefill (0 if the cached probes show no such cost).
        cached_rel_err: largest relative error of the fit on the cached probes.
        held_out_rel_err: largest relative error of the fit on the mixed probes it was not
            fitted to (0 if there were none).
        cached_share: per cached probe, (measured - fixed) / (cold prefill of the same total
            prompt - fixed) as the fit predicts it: the share of a cold prefill that a fully
            cached prompt still costs (the model's own prediction is about 0). Noisy for small
            prompts, where the fitted fixed cost dominates (it can come out below 0).
        cached_ratio: per cached probe, its measured TTFT over the measured cold TTFT of the same
            prompt (fixed cost included on both sides; no fit involved).
    """

    fixed_s: float
    prefill_tokens_per_s: float
    attn_pair_s: float
    decode_base_s: float
    decode_per_seq_s: float
    decode_per_token_s: float
    cold_rel_err: float
    cached_share: tuple[float, ...]
    cached_ratio: tuple[float, ...] = ()
    cached_token_s: float = 0.0
    cached_pair_s: float = 0.0
    cached_rel_err: float = 0.0
    held_out_rel_err: float = 0.0

    @classmethod
    def from_json(cls, data: dict) -> "ProbeFit":
        """The fit from ``probe-profile --json``'s ``fit`` object.

        Raises:
            ValueError: a field missing or not a number.
        """
        try:
            return cls(**{k: float(data[k]) for k in ("fixed_s", "prefill_tokens_per_s", "attn_pair_s", "decode_base_s",
                                                      "decode_per_seq_s", "decode_per_token_s", "cold_rel_err")},
                       cached_share=tuple(float(v) for v in data.get("cached_share", ())),
                       cached_ratio=tuple(float(v) for v in data.get("cached_ratio", ())),
                       **{k: float(data.get(k, 0.0)) for k in ("cached_token_s", "cached_pair_s", "cached_rel_err",
                                                               "held_out_rel_err")})
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a probe fit: {exc}") from None

    def profile(self, device_tokens: int, name: str = "probed", source: str = "pbkv-bench probe") -> HardwareProfile:
        """The fit as a :class:`HardwareProfile` for the simulator (no host tier; KV bytes 1 per
        token: a CPU server has no PCIe load to time), the fixed cost as ``prefill_request_s``
        and the cached terms as they were fitted."""
        return HardwareProfile(name=name, description="fitted from single-request and decode probes on an idle server",
                               source=source, prefill_tokens_per_s=self.prefill_tokens_per_s,
                               decode_base_s=self.decode_base_s, decode_per_seq_s=self.decode_per_seq_s,
                               decode_per_token_s=self.decode_per_token_s, pcie_bytes_per_s=25e9,
                               kv_bytes_per_token=1, device_kv_tokens=device_tokens, host_kv_tokens=0,
                               attn_pair_s=self.attn_pair_s, prefill_request_s=self.fixed_s,
                               cached_token_s=self.cached_token_s, cached_pair_s=self.cached_pair_s)

    def predict(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """The fit's TTFT of one request on the idle server (fixed cost included)."""
        n, c = float(new_tokens), float(cached_tokens)
        return (self.fixed_s + n / self.prefill_tokens_per_s + self.attn_pair_s * n * (c + n / 2)
                + self.cached_token_s * c + self.cached_pair_s * c * c / 2)


def _nonneg_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (a cost term cannot be a saving): while one is
    negative, the last negative column is dropped (set to 0) and the rest refitted. Columns go
    from the surest term to the least sure one (fixed cost, per token, per attention pair), so
    a concave set of probes loses its attention term before its intercept (the scale of a
    coefficient says nothing about which term is wrong)."""
    keep = list(range(x.shape[1]))
    while True:
        coef = np.zeros(x.shape[1])
        sol, *_ = np.linalg.lstsq(x[:, keep], y, rcond=None)
        coef[keep] = sol
        neg = [k for k in keep if coef[k] < 0]
        if not neg:
            return coef
        keep.remove(max(neg))


def fit_prefill(probes: Sequence[PrefillProbe]) -> tuple[float, float, float, float]:
    """Fit the cold probes (``cached_tokens == 0``): ``(fixed_s, tokens_per_s, pair_s, worst
    relative error)``.

    Raises:
        ValueError: fewer than three cold probes of distinct sizes, or no linear cost left.
    """
    cold = [p for p in probes if p.cached_tokens == 0 and not p.held_out]
    if len({p.new_tokens for p in cold}) < 3:
        raise ValueError("the prefill fit needs cold probes of at least three sizes")
    n = np.array([p.new_tokens for p in cold], dtype=float)
    y = np.array([p.seconds for p in cold], dtype=float)
    fixed, per_token, pair_s = _nonneg_lstsq(np.column_stack([np.ones_like(n), n, n * n / 2]), y)
    if per_token <= 0:
        raise ValueError("the cold probes show no cost per token: probe larger prompts")
    pred = fixed + per_token * n + pair_s * n * n / 2
    return float(fixed), float(1.0 / per_token), float(pair_s), float(np.max(np.abs(pred / y - 1.0)))


def fit_decode(probes: Sequence[DecodeProbe]) -> tuple[float, float, float]:
    """Fit the decode probes: ``(base_s, per_seq_s, per_token_s)``.

    Raises:
        ValueError: fewer than three probes, or batch and context that do not both vary.
    """
    if len(probes) < 3 or len({p.batch for p in probes}) < 2 or len({p.context_tokens for p in probes}) < 2:
        raise ValueError("the decode fit needs three probes or more, over at least two batches and two contexts")
    x = np.array([[1.0, p.batch, p.context_tokens] for p in probes])
    y = np.array([p.seconds for p in probes])
    base, per_seq, per_token = _nonneg_lstsq(x, y)
    return float(base), float(per_seq), float(per_token)


def fit_cached(probes: Sequence[PrefillProbe], fixed_s: float, tokens_per_s: float,
               pair_s: float) -> tuple[float, float]:
    """Fit the cached probes (``cached_tokens > 0``, not held out) given the cold terms:
    ``(cached_token_s, cached_pair_s)``, least squares with both >= 0 of what each probe took
    beyond the cold terms' prediction; ``(0, 0)`` without cached probes."""
    cached = [p for p in probes if p.cached_tokens > 0 and not p.held_out]
    if not cached:
        return 0.0, 0.0
    n = np.array([p.new_tokens for p in cached], dtype=float)
    c = np.array([p.cached_tokens for p in cached], dtype=float)
    y = np.array([p.seconds for p in cached], dtype=float) - (fixed_s + n / tokens_per_s + pair_s * n * (c + n / 2))
    if len(cached) == 1:  # one probe cannot tell the terms apart: all of it per token
        return max(0.0, float(y[0] / c[0])), 0.0
    per_token, per_pair = _nonneg_lstsq(np.column_stack([c, c * c / 2]), y)
    return float(per_token), float(per_pair)


def fit_probes(prefill: Sequence[PrefillProbe], decode: Sequence[DecodeProbe]) -> ProbeFit:
    """The cold, cached and decode fits, the errors and the cached probes' shares (:class:`ProbeFit`)."""
    fixed, rate, pair_s, err = fit_prefill(prefill)
    per_cached, per_cached_pair = fit_cached(prefill, fixed, rate, pair_s)
    base, per_seq, per_token = fit_decode(decode)

    def cold(n: int) -> float:  # the fit's cold prefill of n tokens, fixed cost excluded
        return n / rate + pair_s * n * n / 2

    fitted = [p for p in prefill if p.cached_tokens > 0 and not p.held_out]
    shares = tuple((p.seconds - fixed) / cold(p.new_tokens + p.cached_tokens)
                   for p in fitted if cold(p.new_tokens + p.cached_tokens) > 0)
    if not all(math.isfinite(s) for s in shares):
        raise ValueError("a cached probe's share is not finite")
    cold_s = {p.new_tokens: p.seconds for p in prefill if p.cached_tokens == 0 and not p.held_out}
    ratios = tuple(p.seconds / cold_s[p.new_tokens + p.cached_tokens] for p in fitted
                   if cold_s.get(p.new_tokens + p.cached_tokens, 0) > 0)
    fit = ProbeFit(fixed, rate, pair_s, base, per_seq, per_token, err, shares, ratios, per_cached, per_cached_pair)

    def worst(probes: Sequence[PrefillProbe]) -> float:
        return max((abs(fit.predict(p.new_tokens, p.cached_tokens) / p.seconds - 1.0) for p in probes), default=0.0)

    return replace(fit, cached_rel_err=float(worst(fitted)),
                   held_out_rel_err=float(worst([p for p in prefill if p.held_out])))
