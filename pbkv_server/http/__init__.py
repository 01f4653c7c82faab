"""OpenAI-compatible HTTP server with the embedded sim engine (``pbkv-server``, ``docs/architecture.md``, "Live server").

Python API::

    from pbkv_server.http import ServerConfig, run_in_thread
    with run_in_thread(ServerConfig(port=0, policy="pbkv", predictors={"*": "markov"})) as server:
        ...  # point an OpenAI client at server.base_url; server.url + END_PATH for end signals
"""

from pbkv_server.http.app import create_app
from pbkv_server.http.config import ServerConfig
from pbkv_server.http.runner import ServerHandle, run_in_thread, serve_forever

__all__ = ["ServerConfig", "ServerHandle", "run_in_thread", "serve_forever", "create_app"]
