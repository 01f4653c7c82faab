"""The docs' policy lists name exactly the registered policies (issue 35: ``pbkv-paper`` and the
``opt`` variants were missing), checked against the registry rather than typed once and left."""
from __future__ import annotations

import re
from pathlib import Path

from pbkv_server.engine.policies import available_policies, policy_info

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _names(text: str) -> set[str]:
    """Registered policy names quoted as code in ``text``."""
    return set(re.findall(r"`([a-z][a-z0-9.-]*)`", text)) & set(available_policies())


def test_the_server_pages_policy_option_lists_every_server_policy():
    row = next(line for line in (DOCS / "server.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `--policy` |"))
    assert _names(row) == {n for n in available_policies() if "server" in policy_info(n).backends}


def test_the_replay_pages_policy_paragraph_lists_every_policy():
    text = (DOCS / "simulator-and-studies.md").read_text(encoding="utf-8")
    paragraph = text[text.index("\nPolicies: "):text.index("Predictors: ")]
    assert _names(paragraph) == set(available_policies())
