"""Lookahead score of a cache node (PBKV Eq. 2) and its incremental bookkeeping.

    Score(c) = sum_{k=1..K} gamma^(k-1) sum_{w in W_act(c)} s_w^(k) * A_w(c) . P_w^(k)

with ``A_w(c)`` the set of agents of workflow ``w`` that touched node ``c`` (an indicator vector),
``P_w^(k)`` the predicted distribution of ``w``'s k-th next agent and ``s_w^(k) = prod_{j<k}
(1 - p_{w,END}^(j))`` the survival probability. Because ``A_w(c) . P`` is linear in ``A_w(c)``,
each workflow's prediction collapses into one weight per agent,

    weight_w(a) = sum_k gamma^(k-1) s_w^(k) P_w^(k)(a),      Score(c) = sum_w sum_{a in A_w(c)} weight_w(a),

so a new prediction for ``w`` rescores only the nodes ``w`` touched, each in O(|A_w(c)|). The
one-step prefetch value (``docs/architecture.md``, "Formulas") is the same sum with ``K = 1``.

This module is pure Python with no engine dependency: the SGLang plugin reuses it on its own
tree nodes (any object can own a :class:`NodeScore`).

Determinism: the board's results never depend on memory addresses or on string hashing, so a
replay is reproducible in one process and across processes. A workflow's records are kept in an
insertion-ordered dict, not a set (a set of records iterates in address order, and that order
decides the order in which the engine re-files nodes, hence its heap tie-breaks); sums over an
agent set of more than two agents run in sorted order (float addition of three or more terms
depends on the order, and a frozenset of strings iterates in hash order).
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Mapping

from pbkv_contract.prediction import END_AGENT, Prediction

__all__ = ["lookahead_score", "one_step_value", "workflow_weights", "NodeScore", "ScoreBoard"]


def lookahead_score(
    access: Mapping[Hashable, Iterable[str]],
    predictions: Mapping[Hashable, Prediction],
    gamma: float,
    horizon: int | None = None,
) -> float:
    """PBKV Eq. 2 evaluated directly (reference implementation, no caching).

    Args:
        access: workflow id -> agents of that workflow that touched the node (``A_w(c)``).
            Workflows without an entry in ``predictions`` are not active and add nothing.
        predictions: workflow id -> :class:`~pbkv_contract.prediction.Prediction` (K distributions).
        gamma: decay per future step, in (0, 1].
        horizon: use only the first ``horizon`` distributions (``None`` = all of them).

    Returns:
        The expected discounted number of future uses, >= 0.
    """
    total = 0.0
    for wf, agents in access.items():
        pred = predictions.get(wf)
        if pred is None:
            continue
        agents = set(agents)
        dists = pred.dists if horizon is None else pred.dists[:horizon]
        survival = Prediction(dists=list(dists)).survival()
        for k, dist in enumerate(dists):
            total += gamma**k * survival[k] * sum(dist.get(a, 0.0) for a in agents if a != END_AGENT)
    return total


def one_step_value(access: Mapping[Hashable, Iterable[str]], predictions: Mapping[Hashable, Prediction]) -> float:
    """Prefetch value ``sum_w A_w(c) . P_w^(1)`` (``docs/architecture.md``, "Formulas"), reference implementation."""
    return lookahead_score(access, predictions, 1.0, horizon=1)


def workflow_weights(prediction: Prediction, gamma: float, horizon: int) -> tuple[dict[str, float], dict[str, float]]:
    """Per-agent weights of one workflow's prediction (see module docstring).

    Returns:
        ``(weights, first)``: ``weights[a] = sum_{k<=horizon} gamma^(k-1) s^(k) P^(k)(a)`` and
        ``first[a] = P^(1)(a)``; END is left out (it is never an agent of a node).
    """
    weights: dict[str, float] = {}
    survival, decay = 1.0, 1.0
    for dist in prediction.dists[:horizon]:
        factor = decay * survival
        for agent, p in dist.items():
            if agent != END_AGENT and p:
                weights[agent] = weights.get(agent, 0.0) + factor * p
        survival *= 1.0 - dist.get(END_AGENT, 0.0)
        decay *= gamma
    first = {a: p for a, p in prediction.dists[0].items() if a != END_AGENT} if prediction.dists else {}
    return weights, first


class NodeScore:
    """Score state of one cache node.

    Attributes:
        owner: the node object this state belongs to (engine node, SGLang ``TreeNode``...).
        access: active workflow id -> frozenset of agents that touched the node (``A_w(c)``).
        contrib: active workflow id -> (score part, one-step value part).
        score: current Score(c) (PBKV Eq. 2), >= 0.
        value: current one-step prefetch value, >= 0.
        n_ever: number of distinct workflows that ever touched the node (ended ones included).
        multi_step: a workflow of two or more invocations that touched the node has ended. Only
            then does the node count as retired: a single-request workflow (a chat turn) leaves
            cache that the next request (the next turn) may extend, like a request without hints.
        finished_private: the one workflow that ever touched the node ended after two or more
            invocations: the node is that finished workflow's own history, which no later request
            extends (a multi-step agent workflow that ended is not continued by anyone). For the
            workflows of a session (:meth:`ScoreBoard.end_workflow` with ``session``): every
            workflow that ever touched the node belonged to one session, which closed.
        sessions: open session id -> number of its ended workflows that touched the node, or
            ``None``: the node is the history of a live session whose next workflow (the next
            turn) extends it, so it is not retired until the session closes
            (:meth:`ScoreBoard.release_session`).
    """

    __slots__ = ("owner", "access", "contrib", "score", "value", "n_ever", "multi_step", "finished_private",
                 "sessions")

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.access: dict[Hashable, frozenset[str]] = {}
        self.contrib: dict[Hashable, tuple[float, float]] = {}
        self.score = 0.0
        self.value = 0.0
        self.n_ever = 0
        self.multi_step = False
        self.finished_private = False
        self.sessions: dict[Hashable, int] | None = None

    @property
    def retired(self) -> bool:
        """True when every workflow that touched the node has ended, one of them was multi-step
        (:attr:`multi_step`) and no open session holds it (:attr:`sessions`); cache of
        single-request workflows and of anonymous requests never is."""
        return self.multi_step and not self.access and not self.sessions


class ScoreBoard:
    """Incremental Score(c) and one-step value for every node, over all active workflows.

    Cost: :meth:`set_prediction` is O(sum over the workflow's nodes of |A_w(c)|); :meth:`touch`
    O(|A_w(c)|); :meth:`end_workflow` O(nodes of the workflow).
    """

    def __init__(self, gamma: float = 0.7, horizon: int = 3) -> None:
        if not 0.0 < gamma <= 1.0 or horizon < 1:
            raise ValueError(f"need 0 < gamma <= 1 and horizon >= 1, got gamma={gamma}, horizon={horizon}")
        self.gamma = gamma
        self.horizon = horizon
        self._weights: dict[Hashable, tuple[dict[str, float], dict[str, float]]] = {}
        self._totals: dict[Hashable, float] = {}  # workflow -> sum of its weights (total_weight)
        # workflow -> its records, insertion-ordered (see module doc) -> the record's agent set of the
        # workflow (the object in ``rec.access``): set_prediction reads it without a lookup per record
        self._nodes: dict[Hashable, dict[NodeScore, frozenset[str]]] = {}
        # open session -> records its ended workflows touched (held: not retired), insertion-ordered
        self._held: dict[Hashable, dict[NodeScore, None]] = {}
        # agent -> {agent}, one shared set: a workflow's nodes mostly have one agent each, and
        # set_prediction's memo then finds their set by identity, not by comparing sets
        self._single: dict[str, frozenset[str]] = {}

    def total_weight(self, wf: Hashable) -> float:
        """Expected discounted number of ``wf``'s next invocations within the horizon, any agent
        (the sum of its per-agent weights; 0 without a prediction): the score part of a node that
        the workflow's next call uses whichever agent makes it (a growing conversation's latest
        prompt path, :mod:`pbkv_server.engine.policies.conversation`)."""
        return self._totals.get(wf, 0.0)

    def active_workflows(self) -> int:
        """Number of workflows with at least one touched node or a prediction."""
        return len(self._nodes.keys() | self._weights.keys())

    def node_count(self, wf: Hashable) -> int:
        """Number of nodes workflow ``wf`` touched that are still cached."""
        return len(self._nodes.get(wf, ()))

    def records(self, wf: Hashable) -> list[NodeScore]:
        """The records of the cached nodes workflow ``wf`` touched, in first-touch order."""
        return list(self._nodes.get(wf, ()))

    def set_prediction(self, wf: Hashable, prediction: Prediction | None) -> list[NodeScore]:
        """Install ``wf``'s new prediction (``None`` = no prediction, weights 0) and rescore its nodes.

        Returns:
            The records whose score or value changed, in the order the workflow first touched
            them (records copied by a split come after).
        """
        if prediction is None:
            self._weights.pop(wf, None)
            self._totals.pop(wf, None)
        else:
            w = self._weights[wf] = workflow_weights(prediction, self.gamma, self.horizon)
            self._totals[wf] = sum(w[0].values())  # insertion order: deterministic
        changed = []
        weights = self._weights.get(wf)
        memo: dict[frozenset, tuple[float, float]] = {}  # nodes of one workflow share agent sets
        contribution = self._contribution
        nodes = self._nodes.get(wf)
        if nodes is None:
            return changed
        for rec, agents in nodes.items():
            new = memo.get(agents)
            if new is None:
                new = memo[agents] = contribution(weights, agents)
            contrib = rec.contrib
            old = contrib[wf]
            if new != old:
                contrib[wf] = new
                score = rec.score + new[0] - old[0]
                value = rec.value + new[1] - old[1]
                rec.score = score if score > 0.0 else 0.0
                rec.value = value if value > 0.0 else 0.0
                changed.append(rec)
        return changed

    def touch(self, rec: NodeScore, wf: Hashable, agent: str) -> bool:
        """Record that ``agent`` of active workflow ``wf`` used the node; True if its state changed."""
        agents = rec.access.get(wf)
        if agents is None:
            agents = self._single.get(agent)
            if agents is None:
                if len(self._single) >= 4096:  # a bound on memory (agent names come from requests)
                    self._single.clear()
                agents = self._single[agent] = frozenset((agent,))
            rec.access[wf] = agents
            rec.contrib[wf] = (0.0, 0.0)
            rec.n_ever += 1
            rec.finished_private = False
            nodes = self._nodes.get(wf)
            if nodes is None:
                nodes = self._nodes[wf] = {}
            nodes[rec] = agents
            self._rescore(rec, wf)
            return True
        if agent in agents:
            return False
        rec.access[wf] = self._nodes[wf][rec] = agents | {agent}  # the record keeps its place
        self._rescore(rec, wf)
        return True

    def note_ended_use(self, rec: NodeScore) -> None:
        """A workflow that already ended used the node (its request was queued when it ended):
        the node counts as used by a workflow, so it retires once no active workflow holds it."""
        if rec.n_ever == 0:
            rec.n_ever = 1

    def end_workflow(self, wf: Hashable, invocations: int = 0, session: Hashable | None = None) -> list[NodeScore]:
        """Drop ``wf`` from every node it touched (idempotent); returns the records it left, in
        the order of :meth:`set_prediction`.

        Args:
            wf: the workflow id.
            invocations: how many invocations the workflow made; with two or more, the nodes only
                it ever touched become ``finished_private`` (without ``session``).
            session: the open session ``wf`` is a turn of (``None``: none): its nodes stay held by
                the session (not retired, not finished private) until :meth:`release_session`.
        """
        self._weights.pop(wf, None)
        self._totals.pop(wf, None)
        recs = self._nodes.pop(wf, {})
        held = None if session is None else self._held.setdefault(session, {})
        for rec in recs:
            rec.access.pop(wf, None)
            if invocations >= 2:
                rec.multi_step = True
            if held is not None:
                sessions = rec.sessions
                if sessions is None:
                    sessions = rec.sessions = {}
                sessions[session] = sessions.get(session, 0) + 1
                held[rec] = None
                rec.finished_private = False
            else:
                rec.finished_private = rec.n_ever == 1 and invocations >= 2 and not rec.access
            s, v = rec.contrib.pop(wf, (0.0, 0.0))
            if rec.contrib:
                rec.score = max(0.0, rec.score - s)
                rec.value = max(0.0, rec.value - v)
            else:  # exact zero, no float residue
                rec.score = rec.value = 0.0
        if held is not None and not held:  # nothing of the session cached
            del self._held[session]
        return list(recs)

    def release_session(self, session: Hashable) -> list[NodeScore]:
        """Session ``session`` closed (or idled out): its hold on the nodes its ended workflows
        touched goes (idempotent). A released node that no active workflow and no other open
        session holds is retired (if one of its workflows was multi-step), and finished private
        when every workflow that ever touched it was one of this session's.

        Returns:
            The released records, in the order the session first held them (the owner re-files them).
        """
        recs = self._held.pop(session, {})
        for rec in recs:
            sessions = rec.sessions
            count = sessions.pop(session, 0)
            if not sessions:
                rec.sessions = None
            rec.finished_private = (rec.multi_step and rec.n_ever == count and not rec.access
                                    and rec.sessions is None)
        return list(recs)

    def held_sessions(self) -> int:
        """Number of sessions holding at least one cached node."""
        return len(self._held)

    def holds(self, session: Hashable) -> bool:
        """True if open session ``session`` holds at least one cached node (the history its ended
        turns left; False once it is released, or when none of that history is cached)."""
        return session in self._held

    def copy(self, src: NodeScore, owner: Any) -> NodeScore:
        """A new record for ``owner`` with ``src``'s state (a radix node split in two)."""
        rec = NodeScore(owner)
        rec.access = dict(src.access)  # agent sets are immutable frozensets: sharing is safe
        rec.contrib = dict(src.contrib)
        rec.score, rec.value, rec.n_ever = src.score, src.value, src.n_ever
        rec.multi_step, rec.finished_private = src.multi_step, src.finished_private
        for wf, agents in rec.access.items():
            self._nodes[wf][rec] = agents
        if src.sessions:
            rec.sessions = dict(src.sessions)
            for session in rec.sessions:
                self._held[session][rec] = None
        return rec

    def forget(self, rec: NodeScore) -> None:
        """Remove a record whose node left the cache."""
        for wf in rec.access:
            nodes = self._nodes.get(wf)
            if nodes is not None:
                nodes.pop(rec, None)
        if rec.sessions:
            for session in rec.sessions:
                held = self._held.get(session)
                if held is not None:
                    held.pop(rec, None)
                    if not held:
                        del self._held[session]
            rec.sessions = None
        rec.access.clear()
        rec.contrib.clear()
        rec.score = rec.value = 0.0

    @staticmethod
    def _contribution(weights, agents: frozenset) -> tuple[float, float]:
        if weights is None:
            return (0.0, 0.0)
        wk, w1 = weights
        s = v = 0.0
        # two terms add the same in either order; more need a fixed order (hash order varies)
        for a in (agents if len(agents) < 3 else sorted(agents)):
            s += wk.get(a, 0.0)
            v += w1.get(a, 0.0)
        return (s, v)

    def _rescore(self, rec: NodeScore, wf: Hashable) -> bool:
        new = self._contribution(self._weights.get(wf), rec.access[wf])
        old = rec.contrib[wf]
        if new == old:
            return False
        rec.contrib[wf] = new
        rec.score = max(0.0, rec.score + new[0] - old[0])
        rec.value = max(0.0, rec.value + new[1] - old[1])
        return True
