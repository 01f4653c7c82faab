"""The command lines: ``pbkv-server`` (:mod:`.server`) and ``pbkv-bench`` (:mod:`.bench`).

Top of the serving side's layers (``docs/architecture.md``, "Packages and import rules"): a
command line may import every package below it; nothing in ``pbkv_server`` imports it. The
console scripts enter through :mod:`.entry`, which runs a CLI under :func:`pbkv_contract.extras.run` (a
missing extra becomes one line).
"""
