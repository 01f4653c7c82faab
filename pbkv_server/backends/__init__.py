"""Engine backends: inference engines that run PBKV's cache policies inside their own cache.

Each backend is a sibling folder (today :mod:`pbkv_server.backends.sglang`). What every backend
shares (hint parsing from requests, the per-process workflow book, prefetch planning) lives in the
engine core (:mod:`pbkv_server.engine`), so a second backend reuses it instead of copying it. See
``docs/architecture.md``, "Adding an engine backend".
"""
