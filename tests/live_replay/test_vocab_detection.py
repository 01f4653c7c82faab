"""Live replay learns the served model's vocabulary or refuses (issue 27, item 1: a relative
``model_path`` made it fall back silently to ids below 32,000 and the 8,192-token tiny model's
SGLang server died with IndexError)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from pbkv_server.backends.sglang.launch import absolute_paths, build_command
from pbkv_server.loadgen.live_replay import detect_vocab_size


def _serve(info: dict):
    """A fake SGLang on 127.0.0.1 that answers ``/get_model_info`` with ``info``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps(info).encode()
            self.send_response(200 if self.path == "/get_model_info" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def _detect(url: str):
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await detect_vocab_size(client)


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "tiny-qwen2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"vocab_size": 8192}))
    return d


def test_the_vocabulary_comes_from_the_reported_path(model_dir):
    server = _serve({"model_path": str(model_dir), "tokenizer_path": str(model_dir)})
    try:
        assert asyncio.run(_detect(f"http://127.0.0.1:{server.server_port}")) == 8192
    finally:
        server.shutdown()


def test_the_tokenizer_path_is_tried_when_the_model_path_is_unreadable(model_dir):
    server = _serve({"model_path": "runs/tiny-qwen2", "tokenizer_path": str(model_dir)})
    try:
        assert asyncio.run(_detect(f"http://127.0.0.1:{server.server_port}")) == 8192
    finally:
        server.shutdown()


def test_an_unreadable_path_makes_the_replay_refuse_before_sending(tmp_path, monkeypatch):
    """No guess: the command stops before sending anything and asks for --vocab-size."""
    from typer.testing import CliRunner

    from pbkv_server.cli.bench import app

    runner = CliRunner()
    trace = tmp_path / "t.jsonl"
    assert runner.invoke(app, ["synth", "--workflows", "2", "--out", str(trace)]).exit_code == 0
    server = _serve({"model_path": "runs/tiny-qwen2", "tokenizer_path": "runs/tiny-qwen2"})
    sent = []
    monkeypatch.setattr("pbkv_server.loadgen.live_replay._send", lambda *a, **k: sent.append(a))
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        from pbkv_server.loadgen import live_replay

        with pytest.raises(ValueError, match="pass --vocab-size"):
            from pbkv_contract.trace import read_trace

            asyncio.run(live_replay.replay(read_trace(trace), url, 2, "generate", None, 0.0, timeout_s=10))
    finally:
        server.shutdown()
    assert sent == []


def test_the_launcher_passes_an_absolute_model_path(tmp_path, model_dir):
    rel = model_dir.relative_to(tmp_path)
    args = ["--model-path", str(rel), "--tokenizer-path=" + str(rel), "--device", "cpu"]
    assert absolute_paths(args, cwd=str(tmp_path)) == [
        "--model-path", str(model_dir), "--tokenizer-path=" + str(model_dir), "--device", "cpu"]
    # a hub id is not a local path: unchanged
    assert absolute_paths(["--model-path", "Qwen/Qwen2.5-7B"], cwd=str(tmp_path)) == ["--model-path", "Qwen/Qwen2.5-7B"]
    cmd = build_command("lru", ["--model-path", str(model_dir)], python="python")
    assert cmd[cmd.index("--model-path") + 1] == str(model_dir)
