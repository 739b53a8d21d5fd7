"""Common plumbing of the HTTP writers: the shared client, the key, retries, the result."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import httpx
import msgspec

from sidecar.model.config import SummarizerConfig
from sidecar.model.tokens import Tokens
from sidecar.summarizers._retry import RetryPolicy, Sleep, post_with_retry
from sidecar.summarizers._text import estimate_tokens
from sidecar.summarizers.base import (
    EmptySummaryError,
    Progress,
    SummaryError,
    SummaryRequest,
    SummaryResult,
)

log = logging.getLogger("sidecar.summarizers")
_encoder = msgspec.json.Encoder()
_SENSITIVE = re.compile(r"(?i)auth|key|token|secret|cookie")


#: A streamed summary is cut once its text passes ``max_tokens`` x this many characters. A
#: token of prose or code is about 4; past 16 the writer has run away (a server that ignores
#: ``max_tokens``), and holding its text until the deadline would take the daemon's memory.
STREAM_CHARS_PER_TOKEN = 16
#: The stream itself (events, JSON framing, an event that never closes) is cut past this many
#: characters per character of that text budget.
STREAM_FRAMING = 64


class StreamState:
    """Accumulates one attempt's streamed text and usage; ``max_tokens`` bounds the text
    (``STREAM_CHARS_PER_TOKEN``): past it the attempt fails (retryable, as a broken stream)."""

    def __init__(
        self, progress: Progress | None, max_tokens: int | None = None, provider: str = ""
    ) -> None:
        self.chunks: list[str] = []
        self.chars = 0
        self.tokens: Tokens | None = None
        self.finish: str | None = None
        self.completed = False  # the provider said the message is over ([DONE], message_stop)
        self._progress = progress
        self.max_tokens = max_tokens
        self.max_chars = None if max_tokens is None else max_tokens * STREAM_CHARS_PER_TOKEN
        self.provider = provider

    @property
    def max_stream_chars(self) -> int | None:
        """The bound of the whole stream (``STREAM_FRAMING``), for ``iter_sse``."""
        return None if self.max_chars is None else self.max_chars * STREAM_FRAMING

    def over_budget(self) -> SummaryError:
        return SummaryError(
            f"{self.provider}: the streamed summary passed its budget ({self.max_chars} "
            f"characters for max_tokens={self.max_tokens}); stream cut",
            retryable=True,
        )

    def add(self, text: str) -> None:
        if not text:
            return
        self.chunks.append(text)
        self.chars += len(text)
        if self.max_chars is not None and self.chars > self.max_chars:
            self.chunks.clear()
            raise self.over_budget()
        if self._progress is not None:
            try:
                self._progress(self.chars)
            except Exception:  # a progress sink must never break the summary
                log.exception("summary progress callback failed")

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def check_complete(self, provider: str) -> StreamState:
        """A stream that stops without its end marker was cut (a proxy, a crash): retry it
        rather than keep a truncated summary."""
        if not self.completed:
            raise SummaryError(
                f"{provider}: the stream ended before the summary was complete", retryable=True
            )
        return self


class HttpSummarizer:
    """Base of the OpenAI-compatible and Anthropic writers."""

    provider_id: str
    model_id: str
    default_base_url: str
    #: Headers of the provider's API besides the content types and the key.
    base_headers: ClassVar[Mapping[str, str]] = {}

    def __init__(
        self,
        cfg: SummarizerConfig,
        *,
        http: httpx.AsyncClient | None = None,
        env: Mapping[str, str] | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not cfg.model:
            raise ValueError(f"summarizer.model is required for provider {cfg.provider!r}")
        self.cfg = cfg
        self.model_id = cfg.model
        self.base_url = (cfg.base_url or self.default_base_url).rstrip("/")
        self.policy = RetryPolicy.from_config(cfg)
        self._http = http
        self._owns_http = http is None
        self._env: Mapping[str, str] = os.environ if env is None else env
        self._sleep = sleep
        self._rand = rand
        self._clock = clock

    def input_limit(self) -> int | None:
        return self.cfg.max_input_tokens

    def api_key(self) -> str | None:
        name = self.cfg.api_key_env
        if not name:
            return None
        value = self._env.get(name, "").strip()
        return value or None

    def secrets(self) -> list[str]:
        """Values that must never appear in an error or a log line."""
        out = [k for k in (self.api_key(),) if k]
        for name, value in (self.cfg.headers or {}).items():
            if _SENSITIVE.search(name) and value:
                out.append(value)
                out.extend(w for w in value.split() if len(w) >= 8)
        return out

    def client(self) -> httpx.AsyncClient:
        """Built at first use; a TLS context (loading the CA store: tens of ms) only for an
        ``https`` endpoint. Every URL is built from ``base_url`` and redirects are not
        followed, so a client for ``http`` never speaks TLS."""
        if self._http is None:
            tls = self.base_url.lower().startswith("https:")
            self._http = httpx.AsyncClient() if tls else httpx.AsyncClient(verify=False)
        return self._http

    async def aclose(self) -> None:
        if self._owns_http and self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    @property
    def url(self) -> str:
        raise NotImplementedError

    def body(self, req: SummaryRequest) -> dict[str, Any]:
        raise NotImplementedError

    async def consume(self, resp: httpx.Response, state: StreamState) -> StreamState:
        """One attempt's response, streamed or not, into ``state`` (a new one per attempt)."""
        raise NotImplementedError

    def headers(self) -> dict[str, str]:
        """JSON in, a stream out, the provider's own (``base_headers``), the configured
        headers, then the key in the provider's header (none when there is no key)."""
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        headers.update(self.base_headers)
        headers.update(self.cfg.headers or {})
        key = self.api_key()
        if key:  # local servers (Ollama, llama.cpp) take no key: no header at all
            headers.update(self.key_header(key))
        return headers

    def key_header(self, key: str) -> dict[str, str]:
        raise NotImplementedError

    async def summarize(
        self, req: SummaryRequest, progress: Progress | None = None
    ) -> SummaryResult:
        state, body = await self.send(req, progress)
        return self.result(state, req, body)

    async def send(
        self, req: SummaryRequest, progress: Progress | None
    ) -> tuple[StreamState, dict[str, Any]]:
        """The request's body, sent (``post``): what was read and the body that was sent."""
        body = self.body(req)
        return await self.post(body, progress, req.max_tokens), body

    async def post(
        self, body: dict[str, Any], progress: Progress | None, max_tokens: int | None = None
    ) -> StreamState:
        """POST ``body`` to ``url`` with the retry policy; each attempt read by ``consume``,
        its text bounded by ``max_tokens`` (``StreamState``)."""

        async def consume(resp: httpx.Response) -> StreamState:
            return await self.consume(resp, StreamState(progress, max_tokens, self.provider_id))

        url = self.url
        log.debug("%s summary request: POST %s model=%s", self.provider_id, url, self.model_id)
        return await post_with_retry(
            self.client(),
            url,
            headers=self.headers(),
            body=_encoder.encode(body),
            consume=consume,
            policy=self.policy,
            provider=self.provider_id,
            secrets=self.secrets(),
            sleep=self._sleep,
            rand=self._rand,
            clock=self._clock,
        )

    def result(
        self, state: StreamState, req: SummaryRequest, body: dict[str, Any]
    ) -> SummaryResult:
        text = state.text.strip()
        if not text:
            raise EmptySummaryError(
                f"{self.provider_id} returned an empty summary"
                + (f" (finish reason: {state.finish})" if state.finish else "")
            )
        tokens = state.tokens
        if tokens is None:  # the server reported no usage: estimate both sides
            tokens = Tokens(
                input=estimate_tokens(_encoder.encode(body).decode()),
                output=estimate_tokens(text),
            )
        if state.finish in ("length", "max_tokens"):
            log.warning("%s summary was cut at max_tokens=%d", self.provider_id, req.max_tokens)
        return SummaryResult(
            text=text, tokens=tokens, provider_id=self.provider_id, model_id=self.model_id
        )


def count(value: Any) -> int:
    """A usage figure from a provider's JSON: a positive int, or 0."""
    return value if isinstance(value, int) and value > 0 else 0


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
