"""Entry point ``pbkv`` of the ``sglang.srt.plugins`` group (see pyproject.toml).

SGLang calls :func:`register` via ``load_plugins()`` in the launcher (before argument parsing) and
again in every scheduler process. It is idempotent and adds:

- one eviction policy per registered policy with an ``sglang_name`` (``pbkv``, ``pbkv-he``,
  ``pbkv-lae``, ...: choices of ``--radix-eviction-policy`` and factories in
  ``_EVICTION_POLICY_FACTORIES``);
- tree-core backend ``pbkv`` and radix-cache backend ``pbkv`` (``--radix-cache-backend pbkv``);
- the IPC message for workflow end, a scheduler dispatcher hook for it, the decode-batch
  prefetch hook, a hook making SGLang's ``/close_session`` a workflow end and a session close,
  and the hooks reporting each request's arrival and admission to the cache (:mod:`.admission`)
  (HookRegistry AFTER hooks on ``Scheduler``);
- in the launcher process only: the end route on SGLang's HTTP app and the hook copying
  ``X-PBKV-*`` headers of OpenAI requests into ``custom_params``.
"""

from __future__ import annotations

import logging
import multiprocessing

log = logging.getLogger(__name__)

__all__ = ["register", "register_policies", "SCHEDULER_DISPATCH_TARGET", "SCHEDULER_BATCH_TARGET",
           "SCHEDULER_CLOSE_SESSION_TARGET", "SCHEDULER_QUEUE_TARGET", "SCHEDULER_PREFILL_TARGET",
           "OPENAI_CONVERT_TARGETS"]

SCHEDULER_DISPATCH_TARGET = "sglang.srt.managers.scheduler.Scheduler.init_request_dispatcher"
SCHEDULER_BATCH_TARGET = "sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run"
SCHEDULER_CLOSE_SESSION_TARGET = "sglang.srt.managers.scheduler.Scheduler.close_session"
SCHEDULER_QUEUE_TARGET = "sglang.srt.managers.scheduler.Scheduler._add_request_to_queue"
SCHEDULER_PREFILL_TARGET = "sglang.srt.managers.scheduler.Scheduler.get_new_batch_prefill"
OPENAI_CONVERT_TARGETS = (
    "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._convert_to_internal_request",
    "sglang.srt.entrypoints.openai.serving_completions.OpenAIServingCompletion._convert_to_internal_request",
)

_registered = False


def register() -> None:
    """Register PBKV's policies, backends, IPC type and hooks with SGLang (idempotent).

    Policies are synchronised with the registry on every call, so a policy registered after the
    first call (a test, a late-loaded module) becomes an SGLang choice at the next one; backends
    and hooks are installed once.
    """
    global _registered
    names = register_policies()
    if _registered:
        return
    from sglang.srt.managers.io_struct import hook_custom_types
    from sglang.srt.mem_cache.registry import register_radix_cache_backend, registered_radix_cache_backends
    from sglang.srt.mem_cache.unified_cache.tree_core_registry import (
        register_tree_core_backend,
        registered_tree_core_backends,
    )
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from .admission import request_queued, requests_admitted
    from .cache import BACKEND_NAME, make_pbkv_cache
    from .ipc import PBKVEndWorkflowReq, end_session_workflow, extend_scheduler_dispatcher, headers_to_custom_params
    from .prefetch import after_next_batch
    from .tree_core import TREE_CORE_NAME, make_tree_core

    if TREE_CORE_NAME not in registered_tree_core_backends():
        register_tree_core_backend(TREE_CORE_NAME, make_tree_core)
    if BACKEND_NAME not in registered_radix_cache_backends():
        register_radix_cache_backend(BACKEND_NAME, make_pbkv_cache)
    hook_custom_types(PBKVEndWorkflowReq)

    HookRegistry.register(SCHEDULER_DISPATCH_TARGET, extend_scheduler_dispatcher, HookType.AFTER)
    HookRegistry.register(SCHEDULER_BATCH_TARGET, after_next_batch, HookType.AFTER)
    HookRegistry.register(SCHEDULER_CLOSE_SESSION_TARGET, end_session_workflow, HookType.AFTER)
    HookRegistry.register(SCHEDULER_QUEUE_TARGET, request_queued, HookType.AFTER)
    HookRegistry.register(SCHEDULER_PREFILL_TARGET, requests_admitted, HookType.AFTER)
    if multiprocessing.parent_process() is None:  # the launcher: HTTP app and OpenAI conversion live here
        from sglang.srt.entrypoints import http_server

        from .ipc import install_http_routes

        install_http_routes(http_server.app)
        for target in OPENAI_CONVERT_TARGETS:
            HookRegistry.register(target, headers_to_custom_params, HookType.AFTER)
    _registered = True
    log.info("PBKV plugin registered: policies %s, --radix-cache-backend %s", names, BACKEND_NAME)


def register_policies() -> list[str]:
    """Make every plugin policy of the registry an SGLang ``--radix-eviction-policy`` choice with its
    strategy factory (idempotent). Returns the plugin policy names."""
    from sglang.srt.arg_groups.choices import RADIX_EVICTION_POLICY_CHOICES, add_radix_eviction_policy_choices
    from sglang.srt.mem_cache import utils as cache_utils

    from .strategy import strategies

    plugin_strategies = strategies()
    add_radix_eviction_policy_choices([n for n in plugin_strategies if n not in RADIX_EVICTION_POLICY_CHOICES])
    for name, cls in plugin_strategies.items():
        cache_utils._EVICTION_POLICY_FACTORIES.setdefault(name, cls)
    return list(plugin_strategies)
