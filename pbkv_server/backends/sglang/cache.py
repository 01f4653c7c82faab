"""``--radix-cache-backend pbkv``: SGLang's ``UnifiedRadixCache`` fed with workflow hints.

:class:`PBKVRadixCache` runs on :class:`~pbkv_server.backends.sglang.tree_core.PBKVTreeCore` (SGLang's
Python tree core plus PBKV node records; the Rust core accepts only built-in policies). Hints are
read from ``req.sampling_params.custom_params["pbkv"]``:

- a request's first sight is its invocation (predict, rescore): when the scheduler queues it
  (:func:`~pbkv_server.backends.sglang.admission.request_queued`), or else at ``match_prefix``
  with the request (the scheduler matching a waiting request), whose matched path records the
  agent;
- on ``checkpoint_into_tree`` (prompt and output inserted), the whole inserted path records it.

A policy with lifecycle hooks (``pbkv``) also hears of each request's admission (the scheduler's
new prefill batch, :mod:`.admission`; a request whose KV is inserted counts as admitted), of its
prompt's path once inserted (``checkpoint_into_tree``: at admission only the matched prefix is in
the tree, and ``pbkv``'s rule 7 needs the whole prompt's path) and of its finish
(``checkpoint_into_tree`` of a finished request), through the book
(:mod:`pbkv_server.backends.lifecycle`).

Eviction itself is SGLang's, ordered by the configured strategy (:mod:`.strategy`).
"""

from __future__ import annotations

import logging
from typing import Any

from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams, MatchResult
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from pbkv_server.backends.lifecycle import BackendContext

from .settings import BACKEND_NAME
from .tree_core import TREE_CORE_NAME, PBKVTreeCore
from .workflows import SGLangWorkflowBook

log = logging.getLogger(__name__)

__all__ = ["PBKVRadixCache", "make_pbkv_cache", "BACKEND_NAME"]



class PBKVRadixCache(UnifiedRadixCache):
    """``UnifiedRadixCache`` whose nodes keep per-workflow access indicators and retired state.

    Construct it through :func:`make_pbkv_cache` (server) or with ``params.tree_core_backend =
    "pbkv"`` (tests); any other tree core raises ``TypeError``.

    Attributes:
        book: the process's :class:`~pbkv_server.backends.sglang.workflows.SGLangWorkflowBook`.
    """

    def __init__(self, params):
        super().__init__(params)
        if not isinstance(self.tree_core, PBKVTreeCore):
            raise TypeError(
                f"PBKVRadixCache needs tree core backend {TREE_CORE_NAME!r}, got {type(self.tree_core).__name__} "
                "(set params.tree_core_backend, or use --radix-cache-backend pbkv)")
        context = getattr(self.tree_core.eviction_strategy, "context", None)
        if isinstance(context, BackendContext):  # a PBKV strategy (not SGLang's own)
            context.host_capacity = self._host_tokens()
        log.info("PBKV radix cache ready: policy strategy %s, prefetch %s",
                 type(self.tree_core.eviction_strategy).__name__, self.prefetch_enabled)

    def _host_tokens(self) -> int:
        """HiCache's host-tier size in tokens, 1 if HiCache is on but reports no size, 0 if it is
        off (no ``cache_controller``); the policy's device order depends on it (``pbkv``'s rule 6)."""
        if getattr(self, "cache_controller", None) is None:
            return 0
        size = getattr(getattr(self, "token_to_kv_pool_host", None), "size", None)
        return size if isinstance(size, int) and size > 0 else 1

    # ------------------------------------------------------------------ public API
    @property
    def book(self) -> SGLangWorkflowBook:
        """Workflows, predictor and score board of this scheduler process."""
        return self.tree_core.book

    @property
    def prefetch_enabled(self) -> bool:
        """True when the eviction strategy asks for conservative prefetch (policy ``pbkv``)."""
        return bool(getattr(self.tree_core.eviction_strategy, "prefetch", False))

    def end_workflow(self, workflow_id: str, status: str = "completed") -> bool:
        """Retire ``workflow_id`` (idempotent): its private nodes become first to evict.

        Returns:
            True if the workflow was active. Raises ``ValueError`` for an unknown status.
        """
        return self.book.end_workflow(workflow_id, status)

    def match_prefix(self, params: MatchPrefixParams) -> MatchResult:
        """SGLang's match; a hinted request also registers its invocation and touches the path."""
        result = super().match_prefix(params)
        req = params.req
        if req is not None:
            self.observe_request(req, result.best_match_node)
        return result

    def checkpoint_into_tree(self, req: Any, *, up_to: int, **kwargs) -> None:
        """SGLang's insert of the request's KV; the inserted path then records the agent (a
        request whose KV is written runs: its admission is implied if not reported)."""
        super().checkpoint_into_tree(req, up_to=up_to, **kwargs)
        self.observe_request(req, getattr(req, "last_node", None))
        self.request_admitted(req)
        finished = getattr(req, "finished", None)
        if callable(finished) and finished():  # its KV is in the tree: a final turn's end may retire it
            self.request_finished(req)
        else:
            self.request_cached(req)

    def request_arrived(self, req: Any) -> None:
        """The scheduler queued ``req``: its invocation (first sight only). Never raises."""
        self.observe_request(req, None)

    def request_admitted(self, req: Any) -> None:
        """The scheduler admitted ``req`` into a prefill batch: the policy's ``on_admit`` with its
        matched path (root first; first report only). Never raises."""
        try:
            self.book.begin_request(req)
            rid = getattr(req, "rid", None)
            if rid is not None:
                node_id = getattr(req, "last_node", None)
                path = self.tree_core.path_to_root(node_id) if node_id is not None else []
                self.book.admitted(str(rid), path[::-1])
        except Exception:
            log.exception("PBKV: admission bookkeeping failed for request %s", getattr(req, "rid", "?"))

    def request_cached(self, req: Any) -> None:
        """``req``'s KV was inserted up to ``req.last_node``: the policy's ``on_prompt_cached`` with
        that path (root first; ignored before the admission). Never raises."""
        try:
            rid = getattr(req, "rid", None)
            node_id = getattr(req, "last_node", None)
            if rid is not None and node_id is not None:
                self.book.cached(str(rid), self.tree_core.path_to_root(node_id)[::-1])
        except Exception:
            log.exception("PBKV: insert bookkeeping failed for request %s", getattr(req, "rid", "?"))

    def request_finished(self, req: Any) -> None:
        """``req`` finished with its KV in the tree: the policy's ``on_prompt_cached`` and
        ``on_finish`` (its deepest node), then the end of its own workflow its KV hints asked
        for. Never raises."""
        self.request_cached(req)
        try:
            rid = getattr(req, "rid", None)
            if rid is not None:
                node_id = getattr(req, "last_node", None)
                end = self.tree_core._node_arena.get(node_id) if node_id is not None else None
                self.book.finished(str(rid), end)
        except Exception:
            log.exception("PBKV: finish bookkeeping failed for request %s", getattr(req, "rid", "?"))
        self.book.finish_request(req)

    def observe_request(self, req: Any, node_id: Any) -> None:
        """Register ``req``'s invocation (first call only) and record its agent on the path from
        ``node_id`` to the root. Anonymous or malformed hints change nothing; never raises."""
        try:
            hints = self.book.begin_request(req)
            if hints is not None and node_id is not None:
                self.book.touch(self.tree_core.path_to_root(node_id), hints)
        except Exception:  # bookkeeping must never fail a request
            log.exception("PBKV: hint bookkeeping failed for request %s", getattr(req, "rid", "?"))


def make_pbkv_cache(ctx) -> PBKVRadixCache:
    """Radix-cache factory for ``register_radix_cache_backend`` (argument: SGLang's
    ``TreeCacheBuildContext``). Forces the PBKV Python tree core and keeps SGLang's HiCache setup."""
    from sglang.srt.mem_cache.registry import create_unified_radix_cache

    ctx.params.tree_core_backend = TREE_CORE_NAME
    return create_unified_radix_cache(ctx, cache_class=PBKVRadixCache)
