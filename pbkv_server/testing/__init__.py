"""Test harnesses, shipped so that benchmarks and other virtual environments can import them.

- :mod:`.local_cluster`: pbkv-server replicas behind an SMG router on this machine.
- :mod:`.fuzzing`: schemathesis fuzzing of a live pbkv-server (needs the ``test`` extra).
- :mod:`.sglang`: a tiny random model, a real SGLang server on the CPU and a CPU-pool cache with
  the PBKV plugin (run in ``.venv-sglang``).

Top layer: a harness may import any package; no product module imports it (``docs/architecture.md``,
"Packages and import rules").
"""
