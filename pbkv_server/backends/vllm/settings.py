"""Configuration of the PBKV vLLM plugin, read from the environment of every vLLM process.

vLLM runs its scheduler (and so its ``BlockPool`` and CPU offload manager) in the engine-core
process, which inherits the API server's environment; the plugin therefore reads its settings from
environment variables that ``pbkv-server --engine vllm`` (:mod:`.launch`) sets. This module imports
no vLLM.

- ``PBKV_VLLM_POLICY``: a plugin policy (``pbkv``, ``pbkv-he``, ``pbkv-lae``, or an engine name
  such as ``he``); unset or empty = the plugin leaves vLLM's prefix cache alone.
- ``PBKV_VLLM_CONFIG``: JSON object of :class:`~pbkv_server.backends.settings.PluginSettings`
  (gamma, horizon, predictor, idle_retire_s, ...).
- ``PBKV_VLLM_CONTROL``: path of the Unix datagram socket on which the engine core receives
  workflow ends from the API server (:mod:`.control`).
"""

from __future__ import annotations

import json
import os
from typing import Mapping

from pbkv_server.backends.settings import PluginSettings
from pbkv_server.engine.policies import DEFAULT_POLICY, policy_info, resolve_policy_name, sglang_policy_names

__all__ = ["PluginSettings", "PLUGIN_NAME", "CONNECTOR_NAME", "CACHE_POLICY_NAME", "ENV_POLICY", "ENV_CONFIG",
           "ENV_CONTROL", "DEFAULT_PLUGIN_POLICY", "engine_policy_name", "settings_from_env", "policy_from_env"]

#: Name of the plugin's ``vllm.general_plugins`` entry point (pyproject.toml), for ``VLLM_PLUGINS``.
PLUGIN_NAME = "pbkv"
#: ``kv_connector`` name of :class:`~pbkv_server.backends.vllm.connector.PBKVConnector`.
CONNECTOR_NAME = "PBKVConnector"
#: ``eviction_policy`` name of the CPU offload tier's PBKV cache policy (``kv_connector_extra_config``).
CACHE_POLICY_NAME = "pbkv"
ENV_POLICY = "PBKV_VLLM_POLICY"
#: Plugin policy of a runtime built without PBKV_VLLM_POLICY: the product rule's plugin name (its
#: eviction order; vLLM's offload API gives no room for its prefetch, see the package docstring).
DEFAULT_PLUGIN_POLICY = policy_info(DEFAULT_POLICY).sglang_name
ENV_CONFIG = "PBKV_VLLM_CONFIG"
ENV_CONTROL = "PBKV_VLLM_CONTROL"


def engine_policy_name(policy: str) -> str:
    """The engine-core policy that plugin policy ``policy`` runs (``pbkv-he`` -> ``he``).

    The vLLM plugin runs the same policies as the SGLang plugin, under the same names: those that
    declare a plugin name (``sglang_name``) and need no trace future.

    Raises:
        ValueError: ``policy`` is not a plugin policy (the message lists them).
    """
    plugin = sglang_policy_names()
    name = resolve_policy_name(policy)
    if name not in plugin.values() or policy_info(name).offline:
        raise ValueError(f"{policy!r} is not a PBKV plugin policy; known: {', '.join(plugin)}")
    return name


def policy_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """``PBKV_VLLM_POLICY`` (stripped), or ``None`` when unset or empty."""
    value = (os.environ if environ is None else environ).get(ENV_POLICY, "").strip()
    return value or None


def settings_from_env(policy: str, environ: Mapping[str, str] | None = None) -> PluginSettings:
    """The plugin settings of ``PBKV_VLLM_CONFIG`` (defaults when unset).

    Raises:
        ValueError: the variable is not a JSON object, or has an unknown key or a bad value.
    """
    raw = (os.environ if environ is None else environ).get(ENV_CONFIG, "").strip()
    if not raw:
        return PluginSettings()
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ENV_CONFIG} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{ENV_CONFIG} must be a JSON object")
    return PluginSettings.from_kwargs(policy, config, source=ENV_CONFIG)
