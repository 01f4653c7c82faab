"""Online variable-order context predictor: the next agent given more of the workflow than its current agent.

An orchestrator-led team calls the same agent between every phase (CEO -> CTO -> CEO -> programmer
-> CEO ...), so the first-order chain of :mod:`~pbkv_server.predictors.markov` sees one spread row
for the orchestrator. What comes next depends on what the workflow has done already. This
predictor keeps transition counts for up to five contexts of a workflow's state, longest first:

    (last 3 agents, set of agents visited, calls so far)
    (last 3 agents, set of agents visited)
    last 3 agents (from the third call on)
    last 2 agents (from the second call on)
    current agent

and blends them by Witten-Bell interpolation (the estimator of PPM's method C; Witten & Bell 1991,
"The zero-frequency problem"): from the shortest context up,

    P_c(b) = (n_c(b) + t_c P_shorter(b)) / (n_c + t_c),

with ``n_c(b)`` the count of b after context c, ``n_c`` their sum and ``t_c`` the number of distinct
agents seen after c; below the shortest context is the uniform distribution over the app's agents
seen so far + END. A context never seen passes the shorter one's estimate through; a context seen
often with one follower dominates. No parameter is tuned: the weights come from the counts.

How much better it names the next agent than the first-order chain, on real and synthetic traces,
is measured by ``benchmarks/online_predictors.py`` (docs/predictor.md, "Online predictors").

The k-step distributions follow the same convention as the Markov chain (each conditional on the
workflow still running at step k, PBKV Eq. 2). The chain's state is a whole context, not one agent,
so the number of states can grow as |V|^k; the :data:`MAX_STATES` most likely are kept at each step
and renormalised.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from pbkv_contract.prediction import END_AGENT, Prediction, PredictionQuery, Predictor

from pbkv_server.predictors.vocab import AgentVocabulary, app_key, uniform_dist

__all__ = ["ContextPredictor", "MAX_STATES", "MAX_STEP_CONTEXT"]

#: States of the k-step chain kept per step (the most likely; the rest, renormalised away). It bounds
#: a prediction's cost for apps with many agents (the first-order chain has at most one state per
#: agent); our apps have 1-10 agents, so at K = 3 it drops only the least likely paths.
MAX_STATES = 32
#: The longest context counts calls only up to here; later calls share one bucket. A long coding
#: conversation (hundreds of calls) would otherwise add a context per call that is never seen again,
#: and a server's memory would grow with its traffic rather than with its apps' shapes.
MAX_STEP_CONTEXT = 32
#: Blends kept per app (:meth:`ContextPredictor.next_dist`) and states whose successors are kept (the
#: k-step chain); beyond it they are all dropped and recomputed on demand: a bound on memory only.
MAX_MEMO = 1 << 14

_EMPTY: dict = {}

# A workflow's state: (last three agents, agents visited, calls so far capped); oldest first.
_State = tuple[tuple[str, ...], frozenset, int]


class ContextPredictor(Predictor):
    """Online variable-order context model over agents, one per app (module docstring).

    Args:
        horizon: K (>= 1).

    Raises:
        ValueError: ``horizon`` < 1.
    """

    learns_online = True

    def __init__(self, horizon: int = 3):
        if horizon < 1:
            raise ValueError("horizon must be >= 1")
        self.horizon = horizon
        self.vocab = AgentVocabulary()
        self._counts: dict[str, dict[tuple, Counter]] = {}
        # app -> context -> its row's total: the row's version (a row only ever gains a count)
        self._sizes: dict[str, dict[tuple, int]] = {}
        # app -> (vocabulary size, its sorted support with END, the uniform distribution over it)
        self._bases: dict[str, tuple[int, tuple[str, ...], dict[str, float]]] = {}
        # app -> state -> (contexts, vocabulary size, row totals, next_dist): a blend is kept until
        # one of its inputs (the vocabulary or a row it reads) grows, then recomputed
        self._memo: dict[str, dict[_State, tuple[tuple, int, list, dict[str, float]]]] = {}
        self._workflows: dict[str, tuple[str | None, int, _State]] = {}  # id -> (app, step, state)
        # state -> agent -> the state after it (_advance, a pure function), kept for the k-step chain
        self._steps: dict[_State, dict[str, _State]] = {}
        # the latest observed query and the state after it (None: observe ignored it): predict()
        # right after observe() of the same (frozen) query need not add its agents again nor
        # rebuild that state, both O(history)
        self._observed: tuple[PredictionQuery | None, _State | None] = (None, None)

    # ------------------------------------------------------------------ learning

    def observe(self, query: PredictionQuery) -> None:
        """Count ``query.agent`` after the workflow's previous state (its last observed call, else
        ``query.history``). A query whose step is not after the last observed one is ignored."""
        self.vocab.add_query(query)
        self._observed = (query, None)
        known = self._workflows.get(query.workflow_id)
        if known is not None and query.step <= known[1]:
            return
        if known is not None:
            self._count(query.app, known[2], query.agent)
        elif query.history:
            self._count(query.app, _state(query.history), query.agent)
        state = _state(query.history + (query.agent,))
        self._workflows[query.workflow_id] = (query.app, query.step, state)
        self._observed = (query, state)

    def workflow_ended(self, app: str | None, workflow_id: str, status: str = "completed") -> None:
        """Count END after the workflow's last state once; unknown or ended workflows are ignored."""
        known = self._workflows.pop(workflow_id, None)
        if known is not None:
            self._count(known[0] if known[0] is not None else app, known[2], END_AGENT)

    def _count(self, app: str | None, state: _State, nxt: str) -> None:
        key = app_key(app)
        table = self._counts.setdefault(key, {})
        sizes = self._sizes.setdefault(key, {})
        for ctx in _contexts(state):
            row = table.get(ctx)
            if row is None:
                table[ctx] = row = Counter()
            row[nxt] += 1
            sizes[ctx] = sizes.get(ctx, 0) + 1

    # ------------------------------------------------------------------ prediction

    def next_dist(self, app: str | None, state: _State) -> dict[str, float]:
        """Distribution of the next agent (or END) after ``state`` (module docstring's blend).

        The result is shared with later calls: read it, do not change it."""
        key = app_key(app)
        size = self.vocab.size(app)
        sizes = self._sizes.get(key, _EMPTY)
        memo = self._memo.get(key)
        if memo is None:
            memo = self._memo[key] = {}
        entry = memo.get(state)
        contexts = _contexts(state) if entry is None else entry[0]
        totals = list(map(sizes.get, contexts))  # None: a context never seen
        # the blend reads only the vocabulary and these rows, and they only grow: unchanged sizes
        # mean unchanged inputs, so the kept result is the one a new blend would compute
        if entry is not None and entry[1] == size and entry[2] == totals:
            return entry[3]
        base = self._bases.get(key)
        if base is None or base[0] != size:
            uniform = uniform_dist(self.vocab.agents(app))
            base = self._bases[key] = (size, tuple(uniform), uniform)
        _, support, uniform = base
        dist = uniform.copy()
        table = self._counts.get(key, _EMPTY)
        # Every follower counted for the app is one of its agents or END (observe() adds the agent to
        # the vocabulary before it counts it), so the support, sorted (the same float sums under any
        # PYTHONHASHSEED), holds every row's keys: the blend updates it in place, key by key.
        for i in range(len(contexts) - 1, -1, -1):  # shortest context first
            n = totals[i]
            if not n:
                continue
            row = table[contexts[i]]
            t = len(row)
            d = n + t
            get = row.get
            for b in support:
                dist[b] = (get(b, 0) + t * dist[b]) / d
        if len(memo) >= MAX_MEMO:  # a bound on memory; the cleared blends are recomputed on demand
            memo.clear()
        memo[state] = (contexts, size, totals, dist)
        return dist

    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        """K distributions per query, each conditional on the workflow still running."""
        out = []
        steps = self._steps
        if len(steps) >= MAX_MEMO:  # a bound on memory, as next_dist's
            steps.clear()
        for query in queries:
            observed, state = self._observed
            if query is not observed:  # else observe() added its agents (adding them again changes nothing)
                self.vocab.add_query(query)
                state = None
            if state is None:
                state = _state(query.history + (query.agent,))
            alive: dict[_State, float] = {state: 1.0}
            # a state reached again at a later step has the same next distribution (counts and
            # vocabulary do not change within a query): computed once (~30% of the calls, cc120)
            known: dict[_State, dict[str, float]] = {}
            dists = []
            for k in range(self.horizon):
                if not alive:  # END was certain: later steps are END by convention
                    dists.append({END_AGENT: 1.0})
                    continue
                nxt: dict[str, float] = {}
                states: dict[_State, float] = {}
                last = k == self.horizon - 1  # the states after the last step are never read
                for state, p in alive.items():
                    dist = known.get(state)
                    if dist is None:
                        dist = known[state] = self.next_dist(query.app, state)
                    if not last:
                        after = steps.get(state)
                        if after is None:
                            after = steps[state] = {}
                    for b, q in dist.items():
                        if q <= 0.0:
                            continue
                        nxt[b] = nxt.get(b, 0.0) + p * q
                        if b != END_AGENT and not last:
                            s = after.get(b)
                            if s is None:
                                s = after[b] = _advance(state, b)
                            states[s] = states.get(s, 0.0) + p * q
                dists.append(nxt)
                alive = _top(states, MAX_STATES)
            out.append(Prediction(dists))
        return out


def _state(agents: Sequence[str]) -> _State:
    """The state after calls by ``agents`` (oldest first, non-empty)."""
    return tuple(agents[-3:]), frozenset(agents), min(len(agents), MAX_STEP_CONTEXT)


def _advance(state: _State, agent: str) -> _State:
    last, seen, n = state
    return (last + (agent,))[-3:], seen | {agent}, min(n + 1, MAX_STEP_CONTEXT)


def _contexts(state: _State) -> tuple:
    """The contexts of ``state``, longest first, each tagged so that two never collide; a workflow
    with fewer than three calls has no (longer) last-agents context it cannot fill."""
    last, seen, n = state
    out = [("lsn", last, seen, n), ("ls", last, seen)]
    if len(last) == 3:
        out.append(("l3", last))
    if len(last) >= 2:
        out.append(("l2", last[-2:]))
    out.append(("l1", last[-1:]))
    return tuple(out)


def _top(states: dict[_State, float], keep: int) -> dict[_State, float]:
    """The ``keep`` most likely states, renormalised to sum 1 (empty if no mass is left)."""
    if len(states) > keep:
        states = dict(sorted(states.items(), key=lambda kv: -kv[1])[:keep])
    total = sum(states.values())
    return {s: p / total for s, p in states.items()} if total > 1e-12 else {}
