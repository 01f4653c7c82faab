"""SGLang harnesses on a CPU, for tests and ``benchmarks/sglang_plugin_overhead.py`` (``.venv-sglang``).

- :mod:`.tiny_model`: a seeded tiny random Qwen2 model folder, built offline (needs transformers).
- :mod:`.cpu_server`: a real SGLang server with it on this CPU, through the launcher (imports no SGLang).
- :mod:`.cpu_cache`: a real radix cache with the PBKV backend on CPU pools.
"""
