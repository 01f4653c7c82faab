"""Prefetch from the host tier into idle device space (PBKV, DESIGN.md section 4).

Runs only on decode-only engine steps, when PCIe is otherwise idle. Candidates are host nodes
whose parent is on the device (so the device tier stays prefix-closed), taken greedily by the
policy's prefetch value (one-step value ``sum_w A_w(c) . P_w^(1)`` for pbkv); loading a node makes
its host children candidates in turn. The budget is S = min(S_a, S_bw):

- S_bw = PCIe bandwidth x the decode time of the stretch (tokens the link can move meanwhile);
- S_a = free device space + retired device cache: the conservative variant may evict retired
  nodes only, so active cache is never displaced;
- the aggressive variant may in addition displace up to ``rho`` x device capacity of active
  cache per round, and only nodes whose Score(c) is below the candidate's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Engine
    from .radix import Node

__all__ = ["conservative_prefetch", "aggressive_prefetch", "greedy_prefetch"]

#: Most candidates examined per round (bounds the decision time; skipped ones stay queued).
MAX_CANDIDATES = 64


def conservative_prefetch(engine: "Engine", seconds: float) -> int:
    """Prefetch for a decode-only stretch of ``seconds``; never evicts active cache.

    Returns:
        Tokens loaded to the device.
    """
    return greedy_prefetch(engine, engine.profile.load_tokens(seconds), displace_tokens=0)


def aggressive_prefetch(engine: "Engine", seconds: float, rho: float) -> int:
    """Like :func:`conservative_prefetch`, but may displace up to ``rho`` x device capacity tokens
    of lower-score active cache.

    Raises:
        ValueError: ``rho`` outside [0, 1].
    """
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    return greedy_prefetch(engine, engine.profile.load_tokens(seconds),
                           displace_tokens=int(rho * engine.device_capacity))


def greedy_prefetch(engine: "Engine", budget: int, displace_tokens: int = 0) -> int:
    """Load the best candidates until ``budget`` tokens are used (see module docstring).

    Args:
        engine: the engine whose prefetch heap holds the candidates.
        budget: S_bw, tokens PCIe can move in this round.
        displace_tokens: active device tokens this round may evict (0 = conservative).

    Returns:
        Tokens loaded to the device.
    """
    policy = engine.policy
    skipped: list[tuple] = []
    loaded = displaced = 0
    exhausted = False  # set once eviction could not make room: later candidates use free space only
    for _ in range(MAX_CANDIDATES):
        if budget <= 0:
            break
        entry = engine.pop_prefetch()
        if entry is None:
            break
        node = entry[3]
        size = node.tokens
        if size > budget:
            skipped.append(entry)
            continue
        short = size - engine.device_free()
        if short > 0:
            if exhausted:
                skipped.append(entry)
                continue
            score = node.sc.score if node.sc is not None else 0.0

            def may_evict(victim: "Node") -> bool:
                nonlocal displaced
                if policy.is_retired(victim):
                    return True
                victim_score = victim.sc.score if victim.sc is not None else 0.0
                if displaced + victim.tokens <= displace_tokens and victim_score < score:
                    displaced += victim.tokens
                    return True
                return False

            parent = node.parent
            # pin the candidate (else demotions could drop it from a full host tier) and its
            # parent (never evict the node it hangs from to make room for it)
            engine.lock(parent)
            engine.lock(node)
            engine.evict_device(short, may_evict)
            engine.unlock(node)
            engine.unlock(parent)
            if engine.device_free() < size:
                # The victims come in policy order (retired first, then ascending score), so a
                # refusal means no allowed victim is left for this round.
                exhausted = True
                skipped.append(entry)
                continue
        engine.load(node)
        loaded += size
        budget -= size
    for entry in skipped:
        engine.push_prefetch(entry)
    return loaded
