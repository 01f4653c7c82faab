"""Studies on recorded runs (``pbkv-bench study``; ``docs/simulator-and-studies.md``).

:mod:`.paper` runs the PBKV paper's sensitivity studies on a recorded trace and its predictor,
:mod:`.regime` the regime sweep over (device, host, concurrency); :mod:`.plots` and
:mod:`.report` draw and write both; :mod:`.cli` is the ``pbkv-bench study`` command group.
"""
