"""The summarizer's HTTP client loads a CA store (tens of ms) only for an https endpoint."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from sidecar.model.config import SummarizerConfig
from sidecar.summarizers.openai import OpenAISummarizer


@pytest.fixture
def ca_loads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    loads: list[Any] = []
    real = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        real(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    return loads


async def test_an_http_endpoint_builds_no_tls_context(ca_loads: list[Any]) -> None:
    cfg = SummarizerConfig(provider="openai", model="m", base_url="http://127.0.0.1:9/v1")
    writer = OpenAISummarizer(cfg, env={})
    assert not ca_loads  # nothing at construction
    writer.client()
    assert not ca_loads
    await writer.aclose()


async def test_an_https_endpoint_builds_it_at_first_use(ca_loads: list[Any]) -> None:
    cfg = SummarizerConfig(provider="openai", model="m", base_url="https://example.invalid/v1")
    writer = OpenAISummarizer(cfg, env={})
    assert not ca_loads
    writer.client()
    assert ca_loads
    await writer.aclose()
