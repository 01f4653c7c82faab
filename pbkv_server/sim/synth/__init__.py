"""Seeded synthetic workloads as v1 traces (``pbkv-bench synth``; ``docs/architecture.md``, "Simulator").

:mod:`.agents` holds the multi-agent call graphs and the entry points of every graph
(:func:`~.agents.generate`, :func:`~.agents.write_trace`); :mod:`.chat` the multi-turn chat
traffic, alone or mixed with agent workflows; :mod:`.coding` the coding-agent sessions shaped
after the GitHub Copilot traces; :mod:`.common` what they share (text as hashed segments, the
draws of lengths and words).
"""
