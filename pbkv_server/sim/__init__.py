"""Trace-driven discrete-event simulator (``docs/architecture.md``, "Simulator").

Modules: :mod:`.simulator` (closed-loop replay through the engine core), :mod:`.cluster` (replicas
behind a router), :mod:`.future` (the offline policies' future), :mod:`.synth` and its siblings
(synthetic workloads), :mod:`.metrics` (metric definitions shared with the server), :mod:`.measures`
(speedup, capture, prefill saved), :mod:`.report` (tables, JSON, plots), :mod:`.advise`,
:mod:`.capacity`, :mod:`.regime` and :mod:`.study` (advice and studies). Hardware profiles are in
:mod:`pbkv_server.hardware.profiles`.
Import the submodules directly; this package imports nothing so that light users stay light.
"""
