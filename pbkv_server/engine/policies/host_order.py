"""Online estimate of when a cache node will next be used, for ``pbkv``'s host drop order.

The offline reference's gain where memory is short is almost all in the host tier's drop order
(MIN: drop the host leaf used farthest in the future; ``docs/design/offline-reference.md``).
This module estimates that next-use time online, from what the engine sees of each active
workflow, so the host can drop the leaf with the farthest estimate first
(``docs/design/memory-short-policy.md``, "Host drop order").

Per active workflow ``w`` it keeps the estimated engine time ``T0_w`` (seconds) of ``w``'s next
invocation, updated on the workflow's events:

* request submitted (waiting for admission): its own agent's cache is used at admission, which
  is FIFO, so ``T0`` for that agent is the submission time (every waiting request is used before
  any future one); other cache of ``w`` waits for the invocation after it,
  ``t_submit + D + G``;
* request admitted (decoding): next invocation at ``t_admit + D + G``;
* request finished (tool call / think time): next invocation at ``t_finish + G``;

with ``D`` the typical admission-to-finish time of a request and ``G`` the typical gap from a
finish to the workflow's next invocation, both running means of what the engine observed for the
workflow's app (all apps pooled before the app has any observation). Each later invocation also
waits for admission: the cycle of the steps-ahead term below is ``W + D + G``, ``W`` the app's
running mean of submission-to-admission waits (``queue_wait``; where the device holds a few of
the running prompts, ``W`` was twice ``D + G`` on synthetic codegen, and a cycle without it
ranked a workflow two steps ahead as if it came back in a third of the time it does:
``scripts/probe_pbkv_variants.py``, ``pbkv-noq`` against ``pbkv-qwonly``). Without queueing ``W`` is about 0. The node is then used
with a probability ``q`` per invocation, taken as ``w``'s part of its lookahead score (PBKV Eq. 2,
the expected discounted uses of ``A_w(c)`` in the next K invocations, capped at 1, floored at
:data:`MIN_Q`), so after a geometric number of invocations:
``T_w(c) = T0_w + (1/q - 1) * (W + D + G)``. The score, not the one-step probability, because cache
that the invocation after next uses must not rank as if it were never used (measured: the
one-step probability kept fewer host hits on every memory-short cell,
``docs/design/memory-short-policy.md``). The node's estimate is the minimum over the workflows
that hold it. Retired cache is never used (ranked below all).

Every estimate is an absolute time fixed at an event, so a heap entry stays correct between the
events of its workflows; the policy re-files a workflow's host nodes on each of them (O(nodes
of the workflow) pushes of O(log n)). Deterministic: nothing depends on addresses or hashing.
"""

from __future__ import annotations

import math

#: Floor of the one-step probability ``q`` (a node its workflow is not expected to use next still
#: gets a finite, far estimate, ordered by its workflow's next invocation).
MIN_Q = 1e-3

#: Weight of a new observation in the running means of ``D`` and ``G`` (exponential mean).
ALPHA = 0.1


class _Mean:
    """Exponential running mean of observed durations, seconds (0 before any observation)."""

    __slots__ = ("value", "n")

    def __init__(self) -> None:
        self.value = 0.0
        self.n = 0

    def add(self, x: float) -> None:
        self.n += 1
        # the first observations are averaged plainly, so one early outlier does not linger
        w = max(ALPHA, 1.0 / self.n)
        self.value += w * (x - self.value)


class NextUse:
    """Next-use estimates of active workflows (see module docstring).

    Attributes:
        next_t: workflow id -> estimated engine time of its next invocation, seconds.
        submit_t: workflow id -> {agent: submission time of its oldest waiting request}.
        cycle: workflow id -> ``W + D + G`` of its app when its estimate was set, seconds.
        queue_wait: whether the cycle counts ``W`` (``False``: ``D + G``).
    """

    def __init__(self, queue_wait: bool = True) -> None:
        self.next_t: dict = {}
        self.submit_t: dict = {}
        self.cycle: dict = {}
        self.queue_wait = queue_wait
        self._queued: dict = {}  # (workflow id, agent) -> submission times of its waiting requests, oldest first
        self._wait: dict = {None: _Mean()}  # app -> submission-to-admission wait mean
        self._admit_t: dict = {}  # request id -> admission time
        self._finish_t: dict = {}  # workflow id -> time its latest request finished
        self._dur: dict = {None: _Mean()}  # app -> request duration mean (None: all apps)
        self._gap: dict = {None: _Mean()}  # app -> finish-to-next-invocation gap mean

    # ------------------------------------------------------------------ typical durations
    def _typical(self, table: dict, app) -> float:
        m = table.get(app)
        return (m if m is not None and m.n else table[None]).value

    def _observe(self, table: dict, app, x: float) -> None:
        if x < 0.0:
            return
        table[None].add(x)
        if app is not None:
            table.setdefault(app, _Mean()).add(x)

    def _d_g(self, app) -> tuple[float, float]:
        return self._typical(self._dur, app), self._typical(self._gap, app)

    def _cycle(self, app, d: float, g: float) -> float:
        """One invocation's cycle: the admission wait (``queue_wait``), the request, the gap."""
        return d + g + (self._typical(self._wait, app) if self.queue_wait else 0.0)

    # ------------------------------------------------------------------ events
    def invocation(self, wid, app, agent: str, now: float) -> None:
        """A request of ``agent`` was submitted at ``now``."""
        fin = self._finish_t.pop(wid, None)
        if fin is not None:
            self._observe(self._gap, app, now - fin)
        waits = self.submit_t.setdefault(wid, {})
        waits.setdefault(agent, now)
        if self.queue_wait:
            self._queued.setdefault((wid, agent), []).append(now)
        d, g = self._d_g(app)
        self.cycle[wid] = self._cycle(app, d, g)
        t = now + d + g
        old = self.next_t.get(wid)  # a sooner estimate of another request in flight stays
        self.next_t[wid] = t if old is None or old <= now else min(old, t)

    def admitted(self, wid, app, agent: str | None, request_id, now: float, still_waiting: bool) -> None:
        """A request was admitted at ``now`` (``still_waiting``: another of ``agent`` waits)."""
        if request_id is not None:
            self._admit_t[request_id] = now
        queued = self._queued.get((wid, agent))
        if queued:  # admission is FIFO: the agent's oldest waiting request is the one admitted
            self._observe(self._wait, app, now - queued.pop(0))
            if not queued:
                del self._queued[(wid, agent)]
        waits = self.submit_t.get(wid)
        if waits is not None and agent in waits and not still_waiting:
            del waits[agent]
            if not waits:
                del self.submit_t[wid]
        d, g = self._d_g(app)
        self.cycle[wid] = self._cycle(app, d, g)
        self.next_t[wid] = now + d + g

    def finished(self, wid, app, request_id, now: float) -> None:
        """A request finished at ``now``: the workflow is in its tool / think gap."""
        t0 = self._admit_t.pop(request_id, None)
        if t0 is not None:
            self._observe(self._dur, app, now - t0)
        self._finish_t[wid] = now
        d, g = self._d_g(app)
        self.cycle[wid] = self._cycle(app, d, g)
        if wid not in self.submit_t:
            self.next_t[wid] = now + g

    def ended(self, wid) -> None:
        """Forget a workflow that ended (its cache is retired or held by others)."""
        self.next_t.pop(wid, None)
        self.submit_t.pop(wid, None)
        self.cycle.pop(wid, None)
        self._finish_t.pop(wid, None)
        if self._queued:
            for key in [k for k in self._queued if k[0] == wid]:
                del self._queued[key]

    # ------------------------------------------------------------------ estimate
    def estimate(self, sc, parts: dict | None = None) -> float:
        """Estimated engine time of the next use of the node with score record ``sc`` (seconds;
        ``inf``: no active workflow is known to use it).

        ``parts`` (workflow -> part, one per workflow of ``sc.access``), if given, overrides the
        parts: ``None`` keeps Eq. 2's (by the agents that touched the node); a number ``q > 0``
        means the node is used by ``w``'s next call of any agent with that score part (a growing
        conversation's live path), ``q <= 0`` that ``w`` does not use it (history its
        conversation no longer sends). A dict, not a function: the ``pbkv`` orders ask it at
        every re-filing of an active node."""
        best = math.inf
        next_t, submit_t, cycle = self.next_t, self.submit_t, self.cycle
        for w, agents in sc.access.items():
            t0 = next_t.get(w)
            if t0 is None:
                continue
            q = parts[w] if parts is not None else None
            if q is not None:
                if q > 0.0:
                    t = self.replaced(w, t0, q)
                    if t < best:
                        best = t
                continue
            waits = submit_t.get(w)
            if waits:  # the oldest waiting request of an agent that touched it (a loop: no list per node)
                t = None
                for a in agents:
                    if a in waits:
                        s = waits[a]
                        if t is None or s < t:
                            t = s
                if t is not None:
                    if t < best:
                        best = t
                    continue
            contrib = sc.contrib.get(w)
            q = contrib[0] if contrib is not None else 0.0
            q = MIN_Q if q < MIN_Q else (1.0 if q > 1.0 else q)
            t = t0 + (1.0 / q - 1.0) * cycle.get(w, 0.0)
            if t < best:
                best = t
        return best

    def replaced(self, w, t0: float, q: float) -> float:
        """Next use (engine seconds) by workflow ``w`` (its next call expected at ``t0``) of a
        node whose part for ``w`` is replaced by ``q > 0``: the oldest of ``w``'s waiting
        requests, of any agent, else ``t0`` plus the calls ``q`` says lie ahead times ``w``'s
        cycle. (:meth:`estimate`'s rule for one workflow, which ``pbkv`` also asks of a node
        with one reader.)"""
        waits = self.submit_t.get(w)
        if waits:
            return min(waits.values())
        q = MIN_Q if q < MIN_Q else (1.0 if q > 1.0 else q)
        return t0 + (1.0 / q - 1.0) * self.cycle.get(w, 0.0)
