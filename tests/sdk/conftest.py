"""SDK test fixtures: the fake OpenAI server on a free loopback port, clean SDK state per test,
and a guard that fails any test in which something (SDK or framework) tries to leave the machine."""

from __future__ import annotations

import ipaddress
import socket
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
    import sys

    from pbkv_sdk import autopatch, context, ending, env, routing, stamping

    for name in ("PBKV_SERVER_URL", "PBKV_TRACE_PATH", "PBKV_APP", "PBKV_BODY_HINTS", "PBKV_END_TIMEOUT_S",
                 "PBKV_ROUTING_HEADER", "PBKV_REPLICAS", "PBKV_KV_HINTS", "PBKV_TRACE_TEXT"):
        monkeypatch.delenv(name, raising=False)
    routing.configure(routing_header=None, replicas=None)
    routing._WARNED.clear()
    env._WARNED.clear()
    stamping._WARNED.clear()
    stamping._sendable.cache_clear()  # it warns on a name's first use
    context._UNSTAMPED_WARNED.clear()
    context._BAD_IDS_WARNED.clear()
    ending._NO_SERVER_WARNED.clear()
    if ending._SENDER is not None:
        ending._SENDER._warned.clear()
        ending._SENDER._down_until.clear()
    for holder in autopatch.holders():  # left by a test outside tests/sdk that ran first in this process
        autopatch.release(holder)
    for name in ("pbkv_sdk.integrations.autogen", "pbkv_sdk.integrations.langchain", "pbkv_sdk.integrations.openai_agents"):
        module = sys.modules.get(name)  # only if a test imported it: importing a framework is slow
        if module is not None:
            module._WARNED.clear()
    yield
    ending.flush(5.0)
    routing.configure(routing_header=None, replicas=None)
    for holder in autopatch.holders():  # e.g. instrument_team, which holds it for the process
        autopatch.release(holder)


_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "", None}


def _is_loopback(host) -> bool:
    if host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _no_network(monkeypatch) -> Iterator[None]:
    """Block and record every non-loopback connect or DNS lookup; the test fails if there was any.

    Recorded as well as refused, because frameworks swallow errors of their telemetry threads.
    """
    attempts: list[str] = []
    real_connect, real_connect_ex, real_getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            attempts.append(f"connect {address!r}")
            raise OSError(f"test tried to reach the network: {address!r}")

    def connect(sock, address):
        check(sock, address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        check(sock, address)
        return real_connect_ex(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if not _is_loopback(host.decode() if isinstance(host, bytes) else host):
            attempts.append(f"dns {host!r}")
            raise socket.gaierror(socket.EAI_NONAME, f"test tried to resolve {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield
    assert not attempts, f"network access attempted: {attempts}"
