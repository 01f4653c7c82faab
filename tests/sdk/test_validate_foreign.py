"""``pbkv-sdk validate`` on another tool's file says once that it is not a PBKV trace and names
the importers (issue 27, item 8: it printed one error per input line, then "0 valid")."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pbkv_sdk.cli import app

from .test_cli import _inv

runner = CliRunner()  # output holds stdout and stderr

CHAT_COMPLETIONS = "\n".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"}], "model": "m"})
                             for i in range(30))
CHATDEV_LOG = "\n".join(f"[2024-01-01 10:00:{i:02d} INFO] Programmer: **[Start Chat]** step {i}" for i in range(30))
GHCP_JSON = json.dumps({"requests": [{"message": {"text": "hi"}, "response": [{"value": "x"}]}]}, indent=2)


@pytest.mark.parametrize("text", [CHAT_COMPLETIONS, CHATDEV_LOG, GHCP_JSON], ids=["openai-jsonl", "chatdev", "ghcp"])
def test_a_file_of_another_tool_gets_one_line_naming_the_importers(tmp_path, text):
    path = tmp_path / "other.log"
    path.write_text(text)
    result = runner.invoke(app, ["validate", str(path)])
    out = result.output
    lines = [line for line in out.splitlines() if line.strip()]
    assert result.exit_code == 1
    assert len(lines) == 1, out
    assert "is not a PBKV trace (v1)" in lines[0] and "pbkv-sdk import chatdev" in lines[0]
    assert "0 valid" not in out


def test_a_trace_with_some_bad_lines_keeps_per_line_reporting(tmp_path):
    good = json.dumps(_inv("A", 0, "x").to_json())
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(["{not json", good, "{also bad"]))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert [line.split(":")[1] for line in result.output.splitlines() if line.startswith(str(path))] == ["1", "3"]
    assert "not a PBKV trace" not in result.output
