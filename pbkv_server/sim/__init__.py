"""Trace-driven discrete-event simulator (``docs/architecture.md``, "Simulator").

Modules: :mod:`.profiles` (named hardware profiles), :mod:`.synth` (synthetic workloads),
:mod:`.simulator` (closed-loop replay through the engine core), :mod:`.future` (belady's oracle),
:mod:`.metrics` (metric definitions shared with the server), :mod:`.report` (tables, JSON, plots).
Import the submodules directly; this package imports nothing so that light users stay light.
"""
