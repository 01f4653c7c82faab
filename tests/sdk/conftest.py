"""SDK test fixtures: the fake OpenAI server on a free loopback port, clean SDK state per test."""

from __future__ import annotations

from typing import Iterator

import pytest

from .fake_openai import FakeOpenAI


@pytest.fixture
def fake_llm(serve_asgi) -> Iterator[FakeOpenAI]:
    """A running :class:`FakeOpenAI`; ``.url`` is the server root, ``.base_url`` the ``/v1`` base."""
    fake = FakeOpenAI()
    server = serve_asgi(fake.app)
    fake.url = server.url
    fake.base_url = server.url + "/v1"
    yield fake


@pytest.fixture(autouse=True)
def _fresh_sdk_state(monkeypatch) -> Iterator[None]:
    """Each test starts with no PBKV environment and with its own 'warn once' memory."""
    from pbkv_sdk import ending, stamping

    for name in ("PBKV_SERVER_URL", "PBKV_TRACE_PATH", "PBKV_APP", "PBKV_BODY_HINTS", "PBKV_END_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)
    stamping._WARNED.clear()
    if ending._SENDER is not None:
        ending._SENDER._warned.clear()
    yield
    ending.flush(5.0)
