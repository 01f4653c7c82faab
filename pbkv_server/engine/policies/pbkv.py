"""``pbkv``: the product rule, ``pbkv-paper``'s hierarchy made to hold a stable set where memory is short.

``pbkv-paper`` (:mod:`.pbkv_paper`) ranks active cache by its lookahead score (PBKV Eq. 2), the
expected discounted number of uses in the next K invocations. Where the reusable working set
exceeds device + host, every active workflow's cache has a similar score, ties fall to LRU, and
the cache thrashes: each workflow loses its history just before it comes back (LRU on a cyclic
pattern). The offline reference `opt` instead keeps some workflows whole. This rule keeps the hierarchy
(finished private cache first, guard fallback to LRU) and changes eight things
(``docs/design/memory-short-policy.md``):

1. **Stable resident set.** Active cache that the predictor still expects to be used (score at
   least :data:`LOW_SCORE`) is ordered by the age of the oldest active workflow that uses it: the
   youngest workflow's cache leaves first, so the oldest workflows keep theirs and finish (the
   MRU-over-workflows order that is optimal for a cyclic pattern larger than the cache). Cache the
   predictor does not expect to be used within the horizon (score below :data:`LOW_SCORE`) leaves
   before it, by score then LRU, as in ``pbkv-paper``. The turns of a session (each its own
   workflow) take the age of the session's first turn.
2. **Cache of a waiting request is needed now.** A request that was submitted and is not yet
   admitted will use its agent's cache at admission with certainty, but the score, predicted at
   that invocation, counts only the *next* agents. Cache of a (workflow, agent) with a request
   waiting ranks above all other active cache.
3. **Host drop order: farthest estimated next use first** (:meth:`host_priority`, an online
   approximation of MIN, :mod:`.host_order`): retired cache first, then active cache by the
   estimated engine time of its next use (its workflows' waiting requests, running requests and
   tool gaps, weighted by the predictor's one-step probability), latest first.
4. **Host tier keeps what ranks highest** (``selective_host``): a device victim is written to a
   full host only if it ranks above the host's own next victim in that order (retired cache, or
   cache whose next use is estimated farther than every host leaf's, is then dropped instead of
   displacing host cache used sooner).
5. **Shared retired cache is the app's, not dead.** Retired cache that more than one workflow
   used (not ``finished_private``: an app-wide prompt prefix, a document several tasks read)
   is reused by workflows that have not reached it yet, and no score can say so: Eq. 2 counts
   only workflows that touched the node. On the device it ranks with the oldest active
   workflow's cache (score 0, then LRU) instead of first; finished private cache still leaves
   first, and the host order keeps retired cache first.
6. **Without a host tier, the device ranks by score.** Rule 1 pays where a host tier catches the
   device's victims and ranks them by next use (rule 3); with no host tier every device victim
   is lost, and ordering by workflow age then discards cache whose score says it is used sooner
   (synth-research at host 0 gains more by score than with rule 1: "Synth-research at host 0"
   in ``docs/design/memory-short-policy.md``). Active cache then ranks by score, then LRU
   (``he``'s order), a waiting request's cache above it (rule 2), shared retired
   cache as :data:`SHARED_RETIRED_USES` expected uses (rule 5). The context's ``host_capacity``
   decides (0: no tier).
7. **A growing conversation's latest path is the next call's prefix** (issue 36,
   :mod:`.conversation`). In an app whose calls extend their conversation's previous prompt (a
   coding agent, a chat; learned online per app), the next call of *any* agent resends the latest
   call's prompt path and nothing else of the history. Eq. 2 scores a node by the agents that
   touched it, so a turn's first path (touched by ``user``, probability 0 inside a turn) scored 0
   and left first, and history a compaction replaced kept a positive score. For a workflow of a
   growing app, the live path now carries the workflow's total weight (any agent,
   :meth:`~pbkv_server.engine.scoring.ScoreBoard.total_weight`; a waiting request of any agent
   counts for rule 2; the host order estimates its next use the same way) and the rest of its
   history 0. Between turns (the session open, no turn active) the session's live path ranks as
   :data:`HELD_USES` expected uses, with the session's age with a host tier (it used to rank with
   unhinted cache, first out).
8. **With a host tier, a growing conversation's live path ranks by its next use** (issue 33,
   ``docs/design/next-use-time.md``). On a coding agent the next agent is nearly always
   ``main``, so workflow ages (rule 1) say little about which conversation's path to keep;
   *when* each conversation calls again does. On the device, active cache whose every active
   reader is a workflow of a growing app (rule 7) and whose score is at least
   :data:`LOW_SCORE` ranks ``(1, GROWING_KEY, -due, t)`` (waiting: band 2), ``due`` being its
   next use as rule 3 estimates it for the host order (engine seconds: a waiting request's
   submission time; while a request runs, admission plus the app's mean duration and gap; in a
   gap, the finish plus the app's mean gap; the *mean*, which on 40 Claude Code conversations did
   as well as the median, ``pbkv-survival``). It ranks above all other cache of its band, since
   a growing conversation's live path is read by the conversation's next call for certain (rule
   7 gives it the workflow's total weight), and by due among itself; the host tier already
   ranks it so (rule 3). Without a host tier rule 6 stays: on the synthetic coding agent the
   score (which knows a turn is about to end) ranks better than the estimate, which cannot. Every
   other node (multi-agent workflows, held sessions between turns, retired, unhinted and
   low-score cache) ranks by rules 1-7, so traffic without a growing app is ordered as before.

Under the guard's fallback both tiers rank as in ``lae`` (retired first, then LRU), every device
victim is written to the host (no selective host) and nothing is prefetched, so the fallback is
``lru`` except for retired cache.

Admission stays FIFO: admitting the oldest workflow's request first gained more on agent-only
traces but made mixed chat + agent traffic slower than LRU (``docs/design/memory-short-policy.md``).

Traffic without hints is ordered exactly as ``lru`` (every node ranks ``(1, -inf, 0, last_access)``);
chat turns (single-request workflows) have no active cache once they end,
and their ages follow submission order.

State kept per active workflow: its age (a sequence number from its first invocation), its
waiting requests per agent and its next-use estimate, fed by :meth:`on_invocation`,
:meth:`on_admit`, :meth:`on_finish` and :meth:`on_workflow_end`. The SGLang plugin and the vLLM
backend feed them from their schedulers (:mod:`pbkv_server.backends.lifecycle`; what they cannot
feed: docs/sglang-plugin.md and docs/vllm-backend.md). A caller that fed none of them would see
every workflow as equally old, nothing waiting and no estimate: the device order would degrade to
``pbkv-paper``'s and the host order to score, then LRU.
"""

from __future__ import annotations

import heapq
import itertools
import math

from ..radix import DEVICE, HOST, Node
from .base import register_policy
from .conversation import Conversations
from .host_order import NextUse
from .pbkv_paper import PBKVPaperPolicy
from .plan import HeapPlan

#: Lookahead score below which active cache counts as not expected within the horizon (expected
#: discounted uses, PBKV Eq. 2: a 5% chance of one use); such cache leaves before the resident set.
LOW_SCORE = 0.05
#: Expected uses (PBKV Eq. 2 units) that rank shared retired cache on a device without a host tier
#: (rule 6): the next workflow that reaches the prefix uses it once; Eq. 2 cannot count that
#: workflow, which has not touched the node yet.
SHARED_RETIRED_USES = 1.0
#: Second key of a growing conversation's resident cache on the device (rule 8): above all other
#: cache of its band, whose second key is ``-age`` (ages count from 0) or ``-inf``.
GROWING_KEY = 1.0
#: Session ages kept before stale ones are swept (see :meth:`PBKVPolicy._turn_age`): the sweep
#: runs only when the dict exceeds this and twice the sessions the engine keeps.
SESSION_SWEEP_MIN = 64
#: Expected uses (PBKV Eq. 2 units) of the live path of a growing conversation whose session has
#: no active turn (rule 7): the session's next turn extends it once; no prediction covers a
#: turn that has not started.
HELD_USES = 1.0


@register_policy("pbkv")
class PBKVPolicy(PBKVPaperPolicy):
    """Finished private ``(0, 0, ...)``, unlikely ``(1, -inf, score, t)``, resident set ``(1, -age,
    score, t)``, shared retired ``(1, -oldest active age, 0, t)``, waiting requests' cache ``(2,
    -age, score, t)`` (in fallback: retired ``(0, ...)``, then LRU); host order: retired ``(0, ...)``, active
    ``(1, -estimated next use, score, t)``. Without a host tier (rule 6) the device's active cache
    is ``(1, 0, score, t)``, waiting ``(2, 0, score, t)``, shared retired ``(1, 0, 1.0, t)``."""

    summary = ("pbkv-paper + stable resident set with a host tier (youngest workflow first; score order "
               "without one), waiting requests' cache kept, host drops the farthest estimated next use, "
               "selective host")
    sglang_name = "pbkv"

    # rule 4; the cache applies it only while the predicted order runs (in the guard's fallback
    # every victim is written to the host, as ``lru`` writes it)
    selective_host = True
    #: Rule 3's cycle counts the app's mean admission wait (:class:`~.host_order.NextUse`).
    queue_wait_cycle = True
    #: :meth:`priority` ranks an active node with one reader of a growing app by
    #: :meth:`_priority_one` (the same rank without a dict of parts); ``False`` takes the general
    #: path, so a test can check that both rank every node alike.
    one_reader_fast_path = True
    #: Prefetch while requests of hinted workflows wait for admission and none of them is a
    #: growing conversation (``False``: skip the round then, see :meth:`prefetch_plan`).
    prefetch_while_queued = False

    def prefetch_plan(self, seconds: float) -> HeapPlan | None:
        """``pbkv-paper``'s conservative prefetch, except in the guard's fallback (``lru`` does not
        prefetch) and while requests wait for admission none of which is a growing
        conversation's. The free device room a conservative round fills is then what the next
        admission needs, and the round's best candidates by one-step value are cache of
        workflows in their tool gaps, which is evicted again before they call (the waiting
        requests' own prefixes are not known before admission in a multi-agent app). A growing
        conversation's waiting call sends its live path, which carries its workflow's whole
        weight (rule 7), so with one in the queue the round loads it first and runs as before.
        Measured where the device holds a few of the running prompts (synthetic codegen, 40k
        tokens, C = 16: a request waits ~43 s, twice its run and gap), the round cost latency
        (``scripts/probe_pbkv_variants.py``, ``pbkv-nopf``); skipping it whenever a request
        waits, or loading only the waiting conversations' paths, cost some on Claude Code
        (C = 32, host 1x)."""
        if self.fallback:
            return None
        if self._wait and not self.prefetch_while_queued and not self._growing_waits():
            return None
        return super().prefetch_plan(seconds)

    def _growing_waits(self) -> bool:
        """True if a waiting request is a growing conversation's with a cached live path."""
        for wid in self._wait:
            conv = self._wconv.get(wid)
            if conv is not None and self._conv.growing(conv[1]) and self._conv.path(conv[0]):
                return True
        return False

    def __init__(self, context) -> None:
        super().__init__(context)
        self._seq = itertools.count()
        self._age: dict = {}  # active workflow id -> sequence number of its first invocation
        self._wait: dict = {}  # workflow id -> {agent: requests submitted and not yet admitted}
        self._next = NextUse(self.queue_wait_cycle)  # next-use estimates of active workflows (host order)
        self._ages: list = []  # min-heap of (age, workflow id), ended workflows popped lazily
        self._session_age: dict = {}  # session id -> sequence number of its first turn (see _turn_age)
        self._turn_session: dict = {}  # active turn's workflow id -> its session id
        self._session_live: dict = {}  # session id -> its active turns
        self._conv = Conversations(self._refresh_node)  # live paths of growing conversations (rule 7)
        self._wconv: dict = {}  # active workflow id -> (its conversation, its app)

    def priority(self, node) -> tuple:
        """See class docstring (every non-retired tuple has the same shape, so ties fall to LRU)."""
        if not self.context.host_capacity:
            return self._priority_no_host(node)
        sc = node.sc
        wconv = self._wconv
        if wconv and sc is not None and sc.access:  # active cache, readers of growing apps possible
            # each reader's score part (rule 7), computed once: rules 8, 2 and the score all read
            # it (the hottest call of a replay with a host tier: every re-filing of a device victim)
            access = sc.access
            if len(access) == 1 and self.one_reader_fast_path:  # one reader (most nodes of a coding agent's conversation)
                for w in access:
                    pass
                conv = wconv.get(w)
                if conv is not None:
                    conversations = self._conv
                    if conv[1] in conversations.growing_apps:  # rule 7's part replaces Eq. 2's
                        return self._priority_one(node, sc, w, conv, conversations.live_of.get(node))
            parts, score = self._parts_score(node, sc)
            fallback = self.order_guard.fallback
            if score >= LOW_SCORE and not fallback and None not in parts.values():  # rule 8 (_due_rank, inline)
                due = self._due_estimate().estimate(sc, parts)
                wait = self._wait
                if wait:  # rule 2 (_waiting_of: every part is replaced here)
                    for w, part in parts.items():
                        if part > 0.0 and w in wait:
                            return (2, GROWING_KEY, -due, node.last_access)
                return (1, GROWING_KEY, -due, node.last_access)
            if fallback:  # rules 5 and 7 rank inactive cache only
                return self._shared_rank(node)
        else:
            parts = None
            if sc is not None and sc.retired and not sc.finished_private and not self.fallback:
                # rule 5: shared retired cache ranks with the oldest active workflow's
                return (1, -self._oldest_age(), 0.0, node.last_access)
            held = self._held_session(node)
            if held is not None:  # rule 7: the next turn's prefix ranks with its session's age
                return (1, -self._session_age.get(held, math.inf), HELD_USES, node.last_access)
            shared = self._shared_rank(node)
            if shared is not None:
                return shared
        if parts is None:
            score = sc.score
        if self._wait and self._waiting_of(sc, parts):
            band = 2
        elif score < LOW_SCORE:
            return (1, -math.inf, score, node.last_access)
        else:
            band = 1
        ages, keeper = self._age, math.inf  # the oldest reader's age (a loop: min() of a generator costs more)
        for w in sc.access:
            age = ages.get(w, math.inf)
            if age < keeper:
                keeper = age
        return (band, -keeper, score, node.last_access)

    def _priority_one(self, node, sc, w, conv, live) -> tuple:
        """:meth:`priority` of an active node whose one reader ``w`` (its conversation and app
        ``conv``) is a workflow of a growing app (``live``: the node's live paths): the same
        rank, with the same sums, without a dict of parts (the loops of :meth:`priority`,
        :meth:`NextUse.estimate` (its :meth:`~NextUse.replaced`) and :meth:`_waiting_of` over one
        workflow)."""
        part = self.context.board.total_weight(w) if live is not None and conv[0] in live else 0.0
        score = sc.score
        score += part - sc.contrib[w][0]
        if not score > 0.0:
            score = 0.0
        fallback = self.order_guard.fallback
        if score >= LOW_SCORE and not fallback:  # rule 8
            est = self._due_estimate()
            t0 = est.next_t.get(w)
            due = est.replaced(w, t0, part) if t0 is not None and part > 0.0 else math.inf  # estimate()'s rule
            wait = self._wait
            if wait and part > 0.0 and w in wait:  # rule 2
                return (2, GROWING_KEY, -due, node.last_access)
            return (1, GROWING_KEY, -due, node.last_access)
        if fallback:  # rules 5 and 7 rank inactive cache only
            return self._shared_rank(node)
        wait = self._wait
        if wait and part > 0.0 and w in wait:  # rule 2 (_waiting_of with the part replaced)
            band = 2
        elif score < LOW_SCORE:
            return (1, -math.inf, score, node.last_access)
        else:
            band = 1
        return (band, -self._age.get(w, math.inf), score, node.last_access)

    def _priority_no_host(self, node) -> tuple:
        """Device order without a host tier (rule 6): every device victim is lost, so active cache
        ranks by its lookahead score (``he``'s order) instead of by workflow age; a waiting
        request's cache still ranks above it (rule 2), and shared retired cache counts as one
        expected use (rule 5 in score units: the next workflow that reaches the prefix uses it)."""
        sc = node.sc
        if sc is not None and sc.retired and not sc.finished_private and not self.fallback:
            return (1, 0.0, SHARED_RETIRED_USES, node.last_access)
        if self._held_session(node) is not None:  # rule 7
            return (1, 0.0, HELD_USES, node.last_access)
        shared = self._shared_rank(node)
        if shared is not None:
            return shared
        parts, score = self._parts_score(node, sc) if self._wconv else (None, sc.score)  # once for both
        if self._wait and self._waiting_of(sc, parts):
            return (2, 0.0, score, node.last_access)
        return (1, 0.0, score, node.last_access)

    def _waiting(self, node, sc) -> bool:
        """True if a request of a (workflow, agent) that touched the node is submitted and not yet
        admitted (rule 2); on a growing conversation's live path, of any agent (rule 7)."""
        return self._waiting_of(sc, self._parts(node, sc) if self._wconv else None)

    def _waiting_of(self, sc, parts) -> bool:
        """:meth:`_waiting` given the node's :meth:`_parts` (``None``: no part replaced)."""
        wait = self._wait
        for w, agents in sc.access.items():
            ws = wait.get(w)
            if ws is None:
                continue
            part = None if parts is None else parts[w]
            if part is None:
                if any(a in agents for a in ws):
                    return True
            elif part > 0.0:
                return True
        return False

    # ----------------------------------------------------------------- rule 7
    def _parts(self, node, sc) -> dict:
        """Each workflow ``w`` that touched the node (``sc``'s record), in ``sc.access`` order ->
        its score part under rule 7: ``None`` when Eq. 2's holds (``w`` is not of a growing app);
        else its total weight if the node is on its conversation's live path (the next call of
        any agent extends it), 0 if not (history it no longer sends)."""
        return self._parts_score(node, sc)[0]

    def _score(self, node, sc) -> float:
        """The node's score, Eq. 2 with each growing workflow's part replaced (:meth:`_parts`)."""
        if not self._wconv:
            return sc.score
        return self._parts_score(node, sc)[1]

    def _parts_score(self, node, sc) -> tuple[dict, float]:
        """``(parts, score)``: :meth:`_parts` and the score they give (Eq. 2 with each part
        ``w`` replaced: ``sc.score + part - contrib[w]``, in ``sc.access`` order, at least 0
        once a part is replaced), in one pass: every rule of a priority reads them, and a
        priority is asked at every re-filing of an active node."""
        wconv, conversations = self._wconv, self._conv
        growing, live = conversations.growing_apps, conversations.live_of.get(node)
        total_weight, contrib = self.context.board.total_weight, sc.contrib
        score = sc.score
        parts = {}
        changed = False
        for w in sc.access:
            conv = wconv.get(w)
            if conv is None or conv[1] not in growing:
                parts[w] = None
                continue
            part = total_weight(w) if live is not None and conv[0] in live else 0.0
            parts[w] = part
            score += part - contrib[w][0]
            changed = True
        if changed and not score > 0.0:
            score = 0.0
        return parts, score

    def _held_session(self, node):
        """The session whose next turn extends ``node`` (rule 7): the node is on the live path of
        a growing conversation that is a session with no active turn, is not retired, and no
        active workflow holds it; else ``None``."""
        sc = node.sc
        if sc is None or sc.access or sc.retired or self.fallback:
            return None
        convs = self._conv.live_in(node)
        if not convs:
            return None
        for conv in convs:
            if conv not in self._session_live and self._conv.growing(self._conv.app_of(conv)) \
                    and self._session_kept(conv):
                return conv
        return None

    def _refresh_node(self, node) -> None:
        self.context.reorder(node)

    def host_priority(self, node) -> tuple:
        """Host drop order: retired first, then active cache whose estimated next use
        (:meth:`.host_order.NextUse.estimate`, engine seconds) is farthest; unhinted cache and the
        guard's fallback rank as in ``lru``."""
        sc = node.sc
        wconv = self._wconv
        if wconv and sc is not None and sc.access and not self.order_guard.fallback:
            # active cache, predicted order (what the checks below come to, in fewer steps)
            access = sc.access
            if len(access) == 1 and self.one_reader_fast_path:
                # one reader of a growing app (a coding agent's conversation, as in priority):
                # _parts_score and NextUse.estimate over one workflow, the same sums without a
                # dict of parts (every re-filing of a host leaf asks it)
                for w in access:
                    pass
                conv = wconv.get(w)
                conversations = self._conv
                if conv is not None and conv[1] in conversations.growing_apps:
                    live = conversations.live_of.get(node)
                    part = self.context.board.total_weight(w) if live is not None and conv[0] in live else 0.0
                    score = sc.score
                    score += part - sc.contrib[w][0]
                    if not score > 0.0:
                        score = 0.0
                    est = self._next
                    t0 = est.next_t.get(w)
                    due = math.inf
                    if t0 is not None and part > 0.0:
                        t = est.replaced(w, t0, part)
                        if t < due:  # estimate()'s test, kept as is
                            due = t
                    return (1, -due, score, node.last_access)
            parts, score = self._parts_score(node, sc)
            return (1, -self._next.estimate(sc, parts), score, node.last_access)
        if self._held_session(node) is not None:  # rule 7: used by the session's next turn, when unknown
            return (1, -math.inf, HELD_USES, node.last_access)
        shared = self._shared_rank(node)
        if shared is not None:
            return shared
        if not self._wconv:
            return (1, -self._next.estimate(sc), sc.score, node.last_access)
        parts, score = self._parts_score(node, sc)
        return (1, -self._next.estimate(sc, parts), score, node.last_access)

    # ----------------------------------------------------------------- rule 8
    def _growing_only(self, parts) -> bool:
        """True if each reader of an active node (``parts``: its :meth:`_parts`) is a workflow of
        a growing app (every part replaced: rule 8 ranks it); never under the guard's fallback.
        (Active cache is never retired.)"""
        return not self.order_guard.fallback and None not in parts.values()

    def _due_rank(self, node, parts) -> tuple:
        """Rule 8's device rank (with a host tier) of an active node that only growing
        conversations read (``parts``: its :meth:`_parts`) and whose score is at least
        :data:`LOW_SCORE` (below, rule 1 ranks it: history off the live path, a conversation
        expected to end): ``(1, GROWING_KEY, -due, t)``, waiting (rule 2) band 2, with ``due``
        the node's next use as rule 3 estimates it for the host order (engine seconds): above
        all other cache of its band, whose second key (``-age``, ``-inf`` for low scores) is at
        most 0, and by due among itself."""
        sc = node.sc
        due = self._due_estimate().estimate(sc, parts)
        band = 2 if self._wait and self._waiting_of(sc, parts) else 1
        return (band, GROWING_KEY, -due, node.last_access)

    def _due_estimate(self) -> NextUse:
        """The next-use estimate rule 8 reads: rule 3's (the app's mean gaps)."""
        return self._next

    def _rule8_conversation(self, wid):
        """The conversation whose nodes rule 8 re-files on workflow ``wid``'s events (``wid``'s,
        with a host tier and of a growing app), else ``None``: without a host tier rule 8 does
        not apply, and other workflows' nodes keep rules 1-7's re-filing."""
        if not self.context.host_capacity:
            return None
        conv = self._wconv.get(wid)
        if conv is None or not self._conv.growing(conv[1]):
            return None
        return conv[0]

    def _refile_growing(self, wid, conv) -> None:
        """Re-file growing conversation ``conv``'s nodes on both tiers (those of its workflow
        ``wid``) and its live path (rule 8: its estimate moved), as re-filing each of the
        workflow's nodes and then each node of the path would, at less cost.

        Each node is re-filed once: a node's last re-filing decides its entry (its key, and its
        place among equal keys: the order of the last re-filings, ``heaps.py``), so a path node
        is re-filed with the path only, and the callers skip the re-filings of rules 2, 3 and 7
        that this one follows in the same event (no eviction runs between them)."""
        path = self._conv.path_nodes(conv)  # read here only (re-filing changes no path)
        nodes = [node for rec in self.context.board.records(wid) if (node := rec.owner) not in path]
        nodes += path
        self._reorder_each(nodes)

    def _reorder_each(self, nodes) -> None:
        """Re-file each of ``nodes`` in turn, skipping those whose re-filing would change no
        decision (no call: such are all but the last few nodes of a long conversation's chain),
        as ``PrefixCache.rescore`` does: a locked node, a device node with a device child, a host
        node with a child under a host parent. The engine's nodes only: a backend's are its own."""
        reorder = self.context.reorder
        for node in nodes:
            if node.__class__ is Node and (node.lock or (
                    node.n_dev_children if node.tier == DEVICE
                    else node.children and node.parent is not None and node.parent.tier != DEVICE)):
                continue
            reorder(node)

    def _shared_rank(self, node) -> tuple | None:
        """The rank both orders give unhinted cache (as ``lru``), retired cache (first, finished
        private before shared) and everything under the guard's fallback; None for active,
        scored cache, which each order ranks its own way."""
        sc = node.sc
        if sc is None:
            return (1, -math.inf, 0.0, node.last_access)
        if sc.retired:
            return (0, 0 if sc.finished_private else 1, 0.0, node.last_access)
        if self.order_guard.fallback or not sc.access:
            return (1, -math.inf, 0.0, node.last_access)
        return None

    # ----------------------------------------------------------------- hooks
    def on_invocation(self, wf, previous_agent) -> None:
        """A request of ``wf`` was submitted: give a new workflow its age (a turn of a session gets
        its session's: the session is the unit whose history is reused, so its turns must not rank
        as the youngest workflows), mark its agent waiting."""
        wid = wf.workflow_id
        if wid not in self._age:
            session = wf.session
            age = self._age[wid] = next(self._seq) if session is None else self._turn_age(wid, session)
            heapq.heappush(self._ages, (age, wid))
        agent = wf.agent
        ws = self._wait.setdefault(wid, {})
        ws[agent] = ws.get(agent, 0) + 1
        self._next.invocation(wid, wf.app, agent, self._now())
        conv = wf.session if wf.session is not None else wid
        self._wconv[wid] = (conv, wf.app)
        if self._rule8_conversation(wid) is not None:
            # rule 8 re-files every node of the workflow and its live path: that supersedes the
            # re-filings below (see _refile_growing)
            self._refile_growing(wid, conv)
            return
        self._refile(wid, agent)
        self._refile_host(wid)
        self._reorder_each(self._conv.path(conv))  # its total weight changed with the prediction (rule 7)

    def on_admit(self, admission, path) -> None:
        """The request was admitted: its agent no longer waits (its path is locked meanwhile)."""
        wf = admission.workflow
        if wf is None:
            return
        conv = self._admitted(wf, admission, path)
        if conv is not None:
            self._refile_growing(wf.workflow_id, conv)  # rule 8: its live path and estimate moved

    def _admitted(self, wf, admission, path):
        """The admission's bookkeeping (live path, waiting requests, next-use estimate) and the
        re-filings of rules 2 and 3; returns the conversation rule 8 re-files next (its
        re-filing supersedes theirs, which are then skipped: see :meth:`_refile_growing`), or
        ``None``."""
        conv = self._wconv.get(wf.workflow_id)
        if conv is not None and admission.request is not None:
            self._conv.admitted(conv[0], conv[1], admission.blocks, path, admission.request.request_id)
        growing = self._rule8_conversation(wf.workflow_id)  # after admitted(): it counts the growth
        if not self._wait:
            return growing
        wid, agent = wf.workflow_id, admission.agent
        ws = self._wait.get(wid)
        if ws is None or agent not in ws:
            return growing  # an internal request (speculative prefill), or one of an ended incarnation
        ws[agent] -= 1
        still = ws[agent] > 0
        if not still:
            del ws[agent]
            if not ws:
                del self._wait[wid]
            if growing is None:
                self._refile(wid, agent)
        req = admission.request
        self._next.admitted(wid, wf.app, agent, req.request_id if req is not None else None, self._now(), still)
        if growing is None:
            self._refile_host(wid)
        return growing

    def on_prompt_cached(self, request, wf, path) -> None:
        """The request's prompt is now cached deeper than at its admission (SGLang inserts it after
        the prefill): that path is its conversation's live path (rule 7)."""
        conv = self._wconv.get(wf.workflow_id) if wf is not None else None
        if conv is not None:
            self._conv.cached(conv[0], request.request_id, path)

    def on_finish(self, request, wf, end) -> None:
        """A request finished: its workflow is in its tool gap (its next-use estimate moves)."""
        if wf is None or wf.workflow_id not in self._age:
            return
        wid = wf.workflow_id
        self._next.finished(wid, wf.app, request.request_id, self._now())
        conv = self._rule8_conversation(wid)
        if conv is None:
            self._refile_host(wid)
        else:
            self._refile_growing(wid, conv)  # supersedes rule 3's re-filing of its host nodes

    def on_session_close(self, session_id: str) -> None:
        """Forget a closed session's age (its later turns, if any, start a new one) and its live path."""
        self._session_age.pop(session_id, None)
        self._conv.ended(session_id)

    def on_split(self, top, bottom) -> None:
        self._conv.split(top, bottom)

    def on_drop(self, node) -> None:
        self._conv.drop(node)

    def on_workflow_end(self, wf) -> None:
        """Forget the workflow (its nodes are re-filed by the engine: their access changed), and
        its session's age if the session has no active turn and holds no cached history."""
        wid = wf.workflow_id
        self._age.pop(wid, None)
        self._wait.pop(wid, None)
        self._next.ended(wid)
        conv = self._wconv.pop(wid, None)
        if conv is not None and conv[0] == wid:
            self._conv.ended(wid)  # no session: no later call extends it
        session = self._turn_session.pop(wid, None)
        if session is not None:
            live = self._session_live[session] - 1
            if live:
                self._session_live[session] = live
            else:
                del self._session_live[session]
                if not self._session_kept(session):
                    self._session_age.pop(session, None)

    def _turn_age(self, wid, session) -> int:
        """Age of a new turn ``wid`` of ``session``: the session's, while the session is kept
        (:meth:`_session_kept`), else a new one. A session the engine released without telling
        the policy (idleness, the workflow table's bound) holds nothing, so its stale entry is
        never read; the entries are swept when they outnumber the kept sessions, which bounds
        the dict by twice the sessions the engine keeps (decisions do not depend on the sweep)."""
        ages = self._session_age
        age = ages.get(session)
        if age is None or not self._session_kept(session):
            age = ages[session] = next(self._seq)
        self._turn_session[wid] = session
        live = self._session_live
        live[session] = live.get(session, 0) + 1
        if len(ages) > SESSION_SWEEP_MIN and len(ages) > 2 * (len(live) + self._held_sessions()):
            self._session_age = {s: a for s, a in ages.items() if self._session_kept(s)}
        return age

    def _oldest_age(self) -> float:
        """Age of the oldest active workflow (``inf`` if none); entries of ended workflows are
        popped lazily, so the cost is amortised O(log n) per workflow."""
        ages, heap = self._age, self._ages
        while heap:
            age, wid = heap[0]
            if ages.get(wid) == age:
                return age
            heapq.heappop(heap)
        return math.inf

    def _session_kept(self, session) -> bool:
        """A session's age lasts while it has an active turn or the score board holds cached
        history of its ended turns (the hold goes when the engine releases the session)."""
        if session in self._session_live:
            return True
        return self.context.board.holds(session)

    def _held_sessions(self) -> int:
        return self.context.board.held_sessions()

    def _now(self) -> float:
        return self.context.now

    def _refile_host(self, wid) -> None:
        """Re-file workflow ``wid``'s host nodes (their next-use estimate changed); device nodes
        keep their entries (the device order does not read the estimate)."""
        self._reorder_each([rec.owner for rec in self.context.board.records(wid) if rec.owner.tier == HOST])

    def _refile(self, wid, agent) -> None:
        """Re-file the nodes ``agent`` of workflow ``wid`` touched (their waiting rank changed)."""
        nodes = []
        for rec in self.context.board.records(wid):
            agents = rec.access.get(wid)
            if agents is not None and agent in agents:
                nodes.append(rec.owner)
        self._reorder_each(nodes)
