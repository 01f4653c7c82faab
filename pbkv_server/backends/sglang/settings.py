"""Configuration of the PBKV SGLang plugin, read from ``--radix-eviction-policy-config``.

SGLang passes that flag's JSON object as keyword arguments to the eviction strategy's constructor
(``sglang.srt.mem_cache.utils.get_eviction_strategy``), in every scheduler process; the PBKV
strategies hand them to :meth:`PluginSettings.from_kwargs`. This module imports no SGLang.
"""

from __future__ import annotations

from pbkv_server.backends.settings import PluginSettings

__all__ = ["PluginSettings", "PLUGIN_NAME", "BACKEND_NAME"]

#: Name of the plugin's ``sglang.srt.plugins`` entry point (pyproject.toml), for ``SGLANG_PLUGINS``.
PLUGIN_NAME = "pbkv"
#: Name of the plugin's radix-cache and tree-core backends (``--radix-cache-backend pbkv``).
BACKEND_NAME = "pbkv"
