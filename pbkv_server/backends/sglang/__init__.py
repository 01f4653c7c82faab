"""PBKV inside a real SGLang server, as a plugin (``docs/architecture.md``, "Adding an engine backend").

Installed through the ``sglang.srt.plugins`` entry point ``pbkv`` (:func:`plugin.register`), which
adds the eviction policies ``pbkv``, ``pbkv-he`` and ``pbkv-lae`` and the radix-cache backend
``pbkv`` (``--radix-cache-backend pbkv``): a ``UnifiedRadixCache`` subclass on SGLang's Python tree
core whose nodes carry the per-workflow access indicators A_w(c) and retired state, fed by the
hints of ``req.sampling_params.custom_params["pbkv"]``. Scores come from the engine core's
:mod:`pbkv_server.engine.scoring`; no eviction rule is written here twice.

Modules (only :mod:`launch` and :mod:`settings` import without SGLang installed):

- :mod:`settings`: the plugin's configuration (``--radix-eviction-policy-config`` JSON).
- :mod:`workflows`: workflows, predictions and the score board of one scheduler process.
- :mod:`strategy`: the ``EvictionStrategy`` classes SGLang calls ``get_priority`` on.
- :mod:`tree_core`, :mod:`cache`: the tree core and cache subclasses, the backend factory.
- :mod:`prefetch`: conservative prefetch from a scheduler hook via ``load_back``.
- :mod:`ipc`: the workflow-end route on SGLang's HTTP app and its scheduler handler.
- :mod:`plugin`: registration; :mod:`launch`: ``pbkv-server --engine sglang``.

The CPU harnesses (tiny model, CPU server, CPU-pool cache) are :mod:`pbkv_server.testing.sglang`.
"""
