"""Hint endpoints: the token check takes the same time whatever is sent; loopback unless told otherwise."""

from __future__ import annotations

import hmac

import pytest

from pbkv_server.http import ServerConfig
from pbkv_server.http.errors import ApiError
from pbkv_server.http.runner import exposure_warning
from pbkv_server.http.service import PbkvService


@pytest.fixture
def service() -> PbkvService:
    return PbkvService(ServerConfig(port=0, policy="lru", hint_token="s3cret-token"))


def test_token_check_compares_fixed_length_digests_whatever_is_sent(service, monkeypatch):
    compared: list[tuple[int, int]] = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((len(a), len(b))) or real(a, b))
    for headers in ({}, {"X-PBKV-Hint-Token": "s"}, {"X-PBKV-Hint-Token": "x" * 5000},
                    {"authorization": "Bearer s3cret-tokeN"}, {"X-PBKV-Hint-Token": "caf\xe9"}):
        with pytest.raises(ApiError) as caught:
            service.check_hint_token(headers)
        assert caught.value.status == 401 and caught.value.code == "invalid_hint_token"
    # Every attempt, even a missing token, ran one comparison of two 32-byte SHA-256 digests.
    assert compared == [(32, 32)] * 5


@pytest.mark.parametrize("headers", [{"X-PBKV-Hint-Token": "s3cret-token"}, {"authorization": "Bearer s3cret-token"},
                                     {"authorization": "bearer  s3cret-token "}])
def test_right_token_passes_in_either_header(service, headers):
    service.check_hint_token(headers)  # no exception


def test_without_a_configured_token_every_request_passes():
    PbkvService(ServerConfig(port=0, policy="lru")).check_hint_token({})


@pytest.mark.parametrize("host, token, warned", [
    ("127.0.0.1", None, False), ("127.0.0.2", None, False), ("::1", None, False), ("localhost", None, False),
    ("0.0.0.0", None, True), ("::", None, True), ("192.0.2.10", None, True), ("0.0.0.0", "t", False),
])
def test_non_loopback_bind_without_token_warns(host, token, warned):
    message = exposure_warning(ServerConfig(port=0, host=host, hint_token=token))
    assert (message is not None) == warned
    if warned:
        assert host in message and "--hint-token" in message and "Exposing the server" in message


def test_default_bind_address_is_loopback():
    from pbkv_server.cli.server import ServeSettings

    assert ServerConfig().host == "127.0.0.1"
    assert ServeSettings(policy="lru", predictors=[], idle_retire_s=1).host == "127.0.0.1"
