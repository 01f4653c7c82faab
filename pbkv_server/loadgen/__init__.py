"""Load generators that drive a live server over HTTP (``pbkv-bench live-replay``: :mod:`.live_replay`).

The simulator's own workload generators (``pbkv-bench synth``) are :mod:`pbkv_server.sim.synth.agents`;
this package sends real requests, so it sits above the simulator (``docs/architecture.md``,
"Packages and import rules").
"""
