"""Names every layer may need without loading a policy: backends and the baseline/default names.

:mod:`~pbkv_server.engine.policies.base` re-exports them; :mod:`~pbkv_server.engine.types` reads
the baseline from here, so importing the engine's dataclasses imports no policy module.
"""

__all__ = ["REPLAY", "SERVER", "SGLANG", "BASELINE_POLICY", "DEFAULT_POLICY", "REFERENCE_POLICY", "HEADLINE_POLICIES",
           "REAL_TRAFFIC_POLICIES"]

#: Backends: trace replay (``pbkv-bench``), the live sim-engine server, the SGLang plugin.
REPLAY, SERVER, SGLANG = "replay", "server", "sglang"
#: Policy every comparison is made against: SGLang's default radix-cache rule.
BASELINE_POLICY = "lru"
#: Policy ``pbkv-server`` serves with unless told otherwise.
DEFAULT_POLICY = "pbkv"
#: Offline reference that tables report the gap to (replay only): MIN on both tiers over the replay's
#: own order (bounds device hits without prefetch; not latency: docs/design/offline-reference.md).
REFERENCE_POLICY = "opt"
#: The short comparison a summary reports (``pbkv-bench advise``): the baseline, PBKV's rules
#: without and with the workflow hierarchy, the product rule, what SGLang users run today for
#: agent sessions, and the offline reference.
HEADLINE_POLICIES = (BASELINE_POLICY, "lae", "he", DEFAULT_POLICY, "sglang-session", REFERENCE_POLICY)
#: Every policy the real-traffic tables of issue 33 compare (docs/claude-code-regime.md): the
#: headline ones, what users can switch on in SGLang and vLLM today (``tlru``, ``slru``,
#: ``continuum``, ``ttl-pin``, ``kvflow-shipped``, ``spec-prefill``), in the tables' column order.
REAL_TRAFFIC_POLICIES = (BASELINE_POLICY, "lae", "he", "tlru", "slru", "sglang-session", "continuum", "ttl-pin",
                         "kvflow-shipped", "spec-prefill", DEFAULT_POLICY, REFERENCE_POLICY)
