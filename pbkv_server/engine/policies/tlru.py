"""``tlru``: Tail-Optimized LRU (Zhang et al., "Tail-Optimized Caching for LLM Inference",
NeurIPS 2025, arXiv:2510.15152), as SGLang ships it (PR #34012; vLLM PR #37825).

The rule (SGLang's ``TLRUStrategy`` in ``python/sglang/srt/mem_cache/evict_policy.py``): a
conversation whose history is ``L`` tokens and whose next prompt is expected to add ``Q_hat`` new
tokens keeps its next prefill within the TTFT budget of ``xi`` tokens as long as its first
``B = max(0, L + Q_hat - xi)`` tokens stay cached; the tokens after ``B`` can be recomputed within
the budget, so evicting them does not worsen the tail latency ("TEL-safe"). A node is TEL-safe when
the cached prefix before it (its start depth, tokens from the root) is at least ``B``. Eviction
takes TEL-safe nodes first (priority ``-1``), then the rest (``0``), LRU inside each group: the
paper's two phases. ``L`` is the branch's high-water history length: the longest prompt whose path
walked the node, which does not shrink when the tail is evicted (so a shortened conversation is
not walked down to nothing on the next pass).

The two parameters (SGLang's ``threshold`` and ``next_prompt_estimate``, 0 and 0 by default,
which makes the rule LRU; the paper sets them per deployment):

* ``xi`` = :data:`TTFT_BUDGET_S` seconds of prefill on the engine's profile
  (``prefill_tokens_per_s``), the tokens a prefill computes within the budget;
* ``Q_hat`` = the running mean of how much a conversation's prompt grew from its previous call
  (tokens, growth below 0, a compaction, counted as 0), over the conversations the engine saw; a
  conversation is the request's session (``EngineRequest.session_id``: SGLang's session, the
  trace's ``session_id`` in replay), else its workflow; 0 before the first observation.

Modelling choices: ``L`` is the request's prompt tokens on the cache path, recorded at admission
on every node of the path; output KV inserted at finish has no ``L`` of its own, so its ``L`` is
its end depth (it is the conversation's tail). A node's group is computed when the engine re-files
it (on use, on release), so a node filed before ``Q_hat`` moved keeps its group until its next
re-filing (SGLang computes it at each eviction pass).
"""

from __future__ import annotations

from .base import Policy, register_policy

#: TTFT budget of ``xi``, seconds of prefill (see module docstring).
TTFT_BUDGET_S = 1.0


@register_policy("tlru")
class TLRUPolicy(Policy):
    """``(-1 if TEL-safe else 0, last_access)`` (see module docstring). Per-node state (kept here,
    keyed by node): its high-water history length ``L``."""

    summary = "Tail-Optimized LRU: history a next prefill recomputes within a 1 s TTFT budget first, then LRU"
    shipped_by, shipped_as = frozenset({"sglang"}), "tlru eviction"

    def __init__(self, context) -> None:
        super().__init__(context)
        #: ``xi``, tokens a prefill computes within the TTFT budget (0 where the rate is unknown: LRU)
        self.threshold = TTFT_BUDGET_S * context.prefill_tokens_per_s
        self._history: dict = {}  # node -> L, the longest prompt (tokens) whose path walked it
        self._last: dict = {}  # conversation -> prompt tokens of its latest call
        self._growth_sum = 0.0
        self._growth_n = 0

    @property
    def next_prompt_estimate(self) -> float:
        """``Q_hat``: the mean prompt growth between consecutive calls of a conversation (tokens)."""
        return self._growth_sum / self._growth_n if self._growth_n else 0.0

    def priority(self, node) -> tuple:
        """``(-1 if TEL-safe else 0, last_access)``."""
        return (-1 if self.tel_safe(node) else 0, node.last_access)

    def tel_safe(self, node) -> bool:
        """True if the cached prefix before ``node`` still covers ``B = max(0, L + Q_hat - xi)``."""
        end = 0
        n = node
        while n is not None and n.parent is not None:  # the root has no tokens and no parent
            end += n.tokens
            n = n.parent
        history = self._history.get(node, end)
        budget = max(0.0, history + self.next_prompt_estimate - self.threshold)
        return end - node.tokens >= budget

    def on_admit(self, admission, path) -> None:
        """Raise ``L`` of every node of the path to the prompt's tokens; observe the growth of
        the request's conversation."""
        tokens = sum(n.tokens for n in path)
        history = self._history
        for node in path:
            if tokens > history.get(node, 0):
                history[node] = tokens
        request = admission.request
        conv = request.session_id if request is not None else None
        if conv is None and admission.workflow is not None:
            conv = admission.workflow.workflow_id
        if conv is None:
            return
        previous = self._last.get(conv)
        if previous is not None:
            self._growth_sum += max(0, tokens - previous)
            self._growth_n += 1
        self._last[conv] = tokens

    def on_session_close(self, session_id) -> None:
        """Forget the closed session's latest prompt."""
        self._last.pop(session_id, None)

    def on_workflow_end(self, wf) -> None:
        """Forget the workflow's latest prompt (a conversation keyed by its workflow)."""
        self._last.pop(wf.workflow_id, None)

    def on_split(self, top, bottom) -> None:
        """The upper part was walked by every path that walked the node it was cut from."""
        h = self._history.get(bottom)
        if h is not None:
            self._history[top] = h

    def on_drop(self, node) -> None:
        """Forget the node."""
        self._history.pop(node, None)
