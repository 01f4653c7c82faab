"""The closed loop of one replay: trace units submitted to one engine, or to several behind a router
(``docs/architecture.md``, "Simulator"; :func:`pbkv_server.sim.simulator.simulate` builds it).

* At most ``concurrency`` replay units in flight; the next unit of the trace (in trace order)
  starts when one ends.
* Inside a unit, request j+1 is submitted when request j finished plus the recorded tool gap, and
  its workflow's end signal after the recorded trailing gap; a unit's session is closed when its
  last workflow ends (SGLang ``/close_session``).
* Each submission goes to the replica the router picks (replica 0 without a router); end signals
  and session closes go to every replica that served the workflow (what the SDK does with SMG's
  served-by answer header, ``pbkv_sdk.routing``).
* Engine clocks advance together: the loop steps the busy engine with the earliest clock and
  hands an outside event (a submission, an end) over only once every busy engine has reached its
  time, so one engine's clock runs ahead of another's by at most one iteration, as a single
  engine's clock runs ahead of its next submission. With one engine this is the single-engine
  loop: events due at or before the clock first, then one step up to the next event.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pbkv_server.engine import Engine, EngineRequest, Finished, FirstToken
from pbkv_server.sim.cluster import Router
from pbkv_server.sim.future import TraceFuture
from pbkv_server.sim.metrics import MetricsCollector

if TYPE_CHECKING:  # the simulator imports this module
    from pbkv_server.sim.simulator import ReplayUnit, Workload

__all__ = ["ReplayDriver", "SimulationError"]


class SimulationError(RuntimeError):
    """The replay cannot make progress (e.g. a prompt larger than the whole device cache)."""


class ReplayDriver:
    """The event loop of one replay over ``engines`` (its state kept explicit, out of ``simulate``).

    Args:
        engines: the replicas' engines (one without a router).
        workload: the replayed :class:`~pbkv_server.sim.simulator.Workload`.
        concurrency: most replay units in flight (>= 1), over all engines.
        metrics: the collector every request and workflow is reported to.
        router: picks the engine of each submission; ``None``: the one engine serves all.
        future: the offline policies' future (one engine only), bound at each submission and
            consumed at each first token.
        on_unit_end: called with the number of finished units after each one (progress bars).
        speculative: attach each request's next-turn prefix (speculative prefill).

    Raises:
        ValueError: several engines without a router, or a future with several engines.
    """

    _SUBMIT, _END = 0, 1
    #: Engine steps in a row without any event or clock progress before we give up.
    STALL_LIMIT = 10_000

    def __init__(self, engines: Sequence[Engine], workload: "Workload", concurrency: int, metrics: MetricsCollector,
                 *, router: Router | None = None, future: TraceFuture | None = None,
                 on_unit_end: Callable[[int], None] | None = None, speculative: bool = False):
        if not engines or (len(engines) > 1 and router is None):
            raise ValueError("a replay needs one engine, or a router over several")
        if future is not None and len(engines) > 1:
            raise ValueError("an offline future is one engine's: it cannot drive several")
        self.engines = list(engines)
        self.router = router
        self.units = workload.units
        self.concurrency = concurrency
        self.metrics = metrics
        self.future = future
        self.on_unit_end = on_unit_end
        self.speculative = speculative
        self.events: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, unit, request index)
        self.seq = itertools.count()
        self.where: dict[str, tuple[int, int]] = {
            req.request_id: (w, j) for w, unit in enumerate(self.units) for j, req in enumerate(unit.requests)
        }
        self.next_unit = 0
        self.done = 0
        self.submitted_ids: list[str] = []  # request ids in submission order
        self.busy: list[tuple[float, int]] = []  # (clock, replica) of every busy engine, once each
        self.served: dict[str, dict[int, None]] = {}  # workflow -> replicas in first-service order
        self.tokens = [[0, 0, 0, 0] for _ in self.engines]  # per replica: requests, prompt, device, host
        self.replica_of: dict[str, int] = {}  # request id -> replica, until its first token

    def run(self) -> None:
        """Replay every unit to its end.

        Raises:
            SimulationError: an engine stops making progress, or refuses a request.
        """
        for _ in range(min(self.concurrency, len(self.units))):
            self._start_next(0.0)
        engines, events, busy = self.engines, self.events, self.busy
        stalled = 0
        while True:
            t_next = events[0][0] if events else math.inf
            if busy and busy[0][0] < t_next:
                _, r = heapq.heappop(busy)
                engine = engines[r]
                before = engine.clock
                # Stop a decode-only stretch at our next outside event, so it arrives on time.
                out = engine.step(until=events[0][0] if events else None)
                if engine.busy:
                    heapq.heappush(busy, (engine.clock, r))
                for ev in out:
                    if isinstance(ev, FirstToken):
                        acc = self.tokens[r]
                        acc[0] += 1
                        acc[1] += ev.prompt_tokens
                        acc[2] += ev.device_cached_tokens
                        acc[3] += ev.host_cached_tokens
                    self._engine_event(ev)
                stalled = 0 if (out or engine.clock > before) else stalled + 1
                if stalled > self.STALL_LIMIT:
                    where = f"replica {r}" if self.router is not None else "engine"
                    raise SimulationError(
                        f"{where} made no progress in {self.STALL_LIMIT} steps at t={engine.clock:.3f}s "
                        f"(queue {engine.stats.queue_depth}); is a prompt larger than the device cache?")
            elif events:
                self._handle(heapq.heappop(events))
            else:
                break

    def cluster_summary(self) -> dict[str, Any]:
        """The routing figures: ``replicas``, ``single_replica_share`` (share of workflows whose
        requests all went to one replica), ``end_deliveries`` (end signals sent, one per replica
        that served a workflow), ``load_spread`` (most requests on one replica / the mean) and
        ``per_replica`` (per replica: ``requests``, ``hit_rate``, ``host_hit_rate``)."""
        counts = [acc[0] for acc in self.tokens]
        mean = sum(counts) / len(counts)
        return {
            "replicas": len(self.engines),
            "single_replica_share": (sum(len(s) == 1 for s in self.served.values()) / len(self.served)
                                     if self.served else math.nan),
            "end_deliveries": sum(len(s) for s in self.served.values()),
            "load_spread": max(counts) / mean if mean else math.nan,
            "per_replica": [{"requests": n, "hit_rate": d / p if p else 0.0, "host_hit_rate": h / p if p else 0.0}
                            for n, p, d, h in self.tokens],
        }

    # -- events ---------------------------------------------------------------------------------
    def _start_next(self, time: float) -> None:
        if self.next_unit < len(self.units):
            w = self.next_unit
            self.next_unit += 1
            heapq.heappush(self.events, (time, next(self.seq), self._SUBMIT, w, 0))

    def _handle(self, event: tuple[float, int, int, int, int]) -> None:
        time, _, kind, w, j = event
        unit = self.units[w]
        if kind == self._SUBMIT:
            req = unit.requests[j]
            # its first request counts; the unit is its session (session latency)
            self.metrics.workflow_started(unit.workflow_ids[j], time, unit.unit_id)
            self.metrics.request_arrived(req.request_id, time, unit.agents[j], unit.apps[j], unit.workflow_ids[j])
            if self.future is not None:
                self.future.bind(self.engines[0].submitted, req.request_id)
            self.submitted_ids.append(req.request_id)
            if self.speculative and unit.next_prefix:
                req = replace(req, speculative_next=unit.next_prefix[j])
            try:
                self._submit(req, unit.workflow_ids[j], time)
            except ValueError as exc:  # e.g. a prompt larger than the device cache
                raise SimulationError(f"cannot replay {req.request_id}: {exc}") from None
            return
        wid, _, status = unit.ends[j]
        self._end(wid, status, time)
        self.metrics.workflow_ended(wid, time)
        if j + 1 == len(unit.requests):  # the unit's last workflow ended: its slot goes to the next unit
            self._close_session(unit)  # the app closes its session (SGLang /close_session)
            self.done += 1
            if self.on_unit_end is not None:
                self.on_unit_end(self.done)
            self._start_next(time)

    def _submit(self, req: EngineRequest, workflow_id: str, time: float) -> None:
        r = 0 if self.router is None else self.router.route(req, workflow_id, self.engines)
        self.replica_of[req.request_id] = r  # its iterations are that replica's (latency breakdown)
        engine = self.engines[r]
        idle = not engine.busy
        if idle:
            engine.advance_to(time)
        engine.submit(req)
        if idle:
            heapq.heappush(self.busy, (engine.clock, r))
        self.served.setdefault(workflow_id, {})[r] = None

    def _end(self, workflow_id: str, status: str, time: float) -> None:
        for r in self.served.get(workflow_id, ()):
            engine = self.engines[r]
            if not engine.busy:
                engine.advance_to(time)
            engine.end_workflow(workflow_id, status)

    def _close_session(self, unit: "ReplayUnit") -> None:
        # every replica that served one of the unit's workflows holds its history
        replicas = {r: None for wid in dict.fromkeys(unit.workflow_ids) for r in self.served.get(wid, ())}
        for r in replicas:
            self.engines[r].close_session(unit.unit_id)

    def _engine_event(self, ev: FirstToken | Finished) -> None:
        if isinstance(ev, FirstToken):
            self.metrics.first_token(ev, self.replica_of.pop(ev.request_id, None))
            if self.future is not None:
                self.future.consume(ev.request_id)
            return
        self.metrics.finished(ev.request_id, ev.time, ev.output_tokens)
        w, j = self.where[ev.request_id]
        unit = self.units[w]
        end = unit.ends[j]
        last = j + 1 == len(unit.requests)
        if end is not None:  # its workflow ends after the recorded trailing gap
            heapq.heappush(self.events, (ev.time + (unit.gaps_s[j] if last else end[1]), next(self.seq),
                                         self._END, w, j))
        if not last:
            heapq.heappush(self.events, (ev.time + unit.gaps_s[j], next(self.seq), self._SUBMIT, w, j + 1))
