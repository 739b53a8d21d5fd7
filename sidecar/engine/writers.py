"""The summary writers a daemon uses, one per summarizer config, built on first use (the
HTTP writers share one ``httpx`` client)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from typing import Any

import msgspec

from sidecar.engine.host import Host
from sidecar.errors import ErrorCode, SidecarError
from sidecar.model.config import Config, SummarizerConfig
from sidecar.summarizers.base import Summarizer
from sidecar.summarizers.factory import HTTP_WRITERS, build_summarizer


class Writers:
    def __init__(self, host: Host) -> None:
        self.host = host
        self._writers: dict[bytes, Summarizer] = {}
        self._http: Any = None

    def get(self, cfg: Config) -> Summarizer:
        key = msgspec.json.encode(cfg.summarizer)
        found = self._writers.get(key)
        if found is None:
            http = None
            if cfg.summarizer.provider in HTTP_WRITERS:
                if self._http is None:
                    self._http = _http_client(cfg.summarizer.timeout)
                http = self._http
            try:
                found = build_summarizer(
                    cfg.summarizer, http=http, client_call=self.host.client_complete
                )
            except ValueError as exc:
                raise SidecarError(
                    f"summarizer configuration: {exc}", ErrorCode.INVALID_PARAMS
                ) from None
            self._writers[key] = found
        return found

    async def warm(self, cfg: Config) -> None:
        """Build the HTTP writers' client and import the configured writer's module ahead of
        the first compaction, on a thread: the client's imports and TLS setup (~0.2 s of CPU)
        and the writer's (its retry loop, its SSE parser: ~15 ms) would otherwise be the
        first compaction's, counted in the turn that compacted first."""
        provider = cfg.summarizer.provider
        if provider not in HTTP_WRITERS or self._http is not None:
            return
        client = await asyncio.to_thread(
            _warmed_client, cfg.summarizer.timeout, HTTP_WRITERS[provider]
        )
        if self._http is None:
            self._http = client
        else:  # a compaction came first and built its own
            await client.aclose()

    def use(self, summarizer: SummarizerConfig, writer: Summarizer) -> None:
        """Serve compactions under ``summarizer`` with ``writer`` (an embedder's own writer,
        or a test's), instead of building one from the config."""
        self._writers[msgspec.json.encode(summarizer)] = writer

    async def aclose(self) -> None:
        for w in self._writers.values():
            await w.aclose()
        if self._http is not None:
            await self._http.aclose()


#: What httpx's first request imports (httpcore's AnyIO network backend, anyio's asyncio
#: backend: ~15 ms of CPU, measured), imported with the client instead, ahead of the first
#: compaction. Private module paths: if one moves, the first request imports it as before.
_FIRST_REQUEST_IMPORTS = ("httpcore._backends.anyio", "anyio._backends._asyncio")


def _warmed_client(timeout: float, writer_module: str) -> Any:
    """The shared client, with the writer's module imported beside it (same thread)."""
    client = _http_client(timeout)
    importlib.import_module(writer_module)
    return client


def _http_client(timeout: float) -> Any:
    import httpx

    for name in _FIRST_REQUEST_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))
