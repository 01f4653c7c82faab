"""Scenarios shipped with pbkv-server; :mod:`pbkv_server.scenarios.default` answers any app."""
