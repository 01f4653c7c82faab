"""Named hardware profiles (:mod:`.profiles`): GPU and model specs turned into cost-model profiles.

Both the simulator (``pbkv_server.sim``) and the live server (``pbkv_server.http``) price work
with them, so they live below both and neither imports the other (``docs/architecture.md``,
"Packages and import rules"). The cost model itself is :mod:`pbkv_server.engine.cost`.
"""
