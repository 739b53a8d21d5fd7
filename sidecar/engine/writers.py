"""The summary writers a daemon uses, one per summarizer config, built on first use (the
HTTP writers share one ``httpx`` client)."""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.engine.host import Host
from sidecar.errors import ErrorCode, SidecarError
from sidecar.model.config import Config, SummarizerConfig
from sidecar.summarizers.base import Summarizer
from sidecar.summarizers.factory import build_summarizer


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
            if cfg.summarizer.provider in ("openai", "anthropic"):
                if self._http is None:
                    import httpx

                    self._http = httpx.AsyncClient(
                        timeout=httpx.Timeout(cfg.summarizer.timeout, connect=10.0)
                    )
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

    def use(self, summarizer: SummarizerConfig, writer: Summarizer) -> None:
        """Serve compactions under ``summarizer`` with ``writer`` (an embedder's own writer,
        or a test's), instead of building one from the config."""
        self._writers[msgspec.json.encode(summarizer)] = writer

    async def aclose(self) -> None:
        for w in self._writers.values():
            await w.aclose()
        if self._http is not None:
            await self._http.aclose()
