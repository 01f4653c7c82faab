"""An 'existing app' for the `pbkv-sdk record` test: runs the LangGraph claim app on some claims.

Usage: python record_target.py BASE_URL N_CLAIMS. Its only PBKV lines are ``instrument(...)``
and the PBKV http clients inside ``build_langgraph_app``; recording is switched on by the
environment that ``pbkv-sdk record`` sets.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from apps import build_langgraph_app  # noqa: E402

from pbkv_sdk.integrations.langchain import instrument  # noqa: E402

if __name__ == "__main__":
    base_url, n = sys.argv[1], int(sys.argv[2])
    instrument(app="claims")
    graph = build_langgraph_app(base_url)
    for i in range(n):
        graph.invoke({"claim": f"claim{i}", "max_rounds": 1 + i % 2})
    print("app done")
