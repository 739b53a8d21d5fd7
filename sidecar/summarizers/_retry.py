"""One streamed POST with retries, shared by the HTTP writers.

Policy: retry on 408/409/429, 5xx, read/write timeouts and dropped connections (and on in-band
errors a writer marks retryable), with exponential backoff and full jitter, honouring
``Retry-After`` (seconds or an HTTP date; also OpenAI's ``retry-after-ms``), at most
``max_retries`` retries, all under one total ``deadline``. Any other 4xx is permanent, and so is
a connection that cannot be made at all (refused, unresolvable host, connect timeout): a server
that is not there now will not be there after a backoff, and retrying it cost every compaction
seconds. Every byte read must arrive within ``timeout`` seconds. Cancellation closes the stream
at once and propagates. The loop itself is tenacity's; this module only says what to retry,
how long to wait and when to stop.

Errors become :class:`SummaryError` naming the endpoint (without userinfo or query, where
credentials may sit), with the status and a short provider message, redacted of the API key
(and anything that looks like one).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import msgspec
import tenacity
from httpx_sse import EventSource, SSEError

from sidecar.model.config import SummarizerConfig
from sidecar.summarizers._text import redact, trim
from sidecar.summarizers.base import SummaryError

log = logging.getLogger("sidecar.summarizers")

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
ERROR_BODY_CAP = 16 * 1024
JSON_BODY_CAP = 32 * 1024 * 1024
#: How long the rest of a stream is read after its last event (``finish``).
FINISH_SECONDS = 0.25
# The running attempt's deadline (its ``asyncio.timeout``), which ``finish`` keeps clear of.
_attempt: contextvars.ContextVar[asyncio.Timeout | None] = contextvars.ContextVar(
    "attempt", default=None
)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    max_retries: int = 4
    deadline: float = 600.0
    timeout: float = 120.0
    base_delay: float = 0.5
    max_delay: float = 30.0

    @classmethod
    def from_config(cls, cfg: SummarizerConfig) -> RetryPolicy:
        return cls(max_retries=max(0, cfg.max_retries), deadline=cfg.deadline, timeout=cfg.timeout)

    def backoff(self, retry: int, rand: Callable[[], float]) -> float:
        """Full jitter: uniform in ``[0, min(max_delay, base * 2**retry)]``."""
        return rand() * min(self.max_delay, self.base_delay * (2.0**retry))


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


def parse_retry_after(headers: httpx.Headers, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (delta or HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now())


def provider_message(raw: bytes, limit: int = 300) -> str:
    """A short human message out of an error body (JSON ``error.message`` or plain text)."""
    text = raw.decode("utf-8", "replace")
    try:
        data: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return trim(text, limit)
    msg: Any = None
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("type")
        elif isinstance(err, str):
            msg = err
        msg = msg or data.get("message") or data.get("detail")
    return trim(str(msg) if msg else text, limit)


def status_error(
    provider: str, status: int, raw: bytes, headers: httpx.Headers, secrets: Sequence[str]
) -> SummaryError:
    message = redact(provider_message(raw), secrets) or httpx.codes.get_reason_phrase(status)
    return SummaryError(
        f"{provider} API error {status}: {message}",
        retryable=is_retryable_status(status),
        status=status,
        retry_after=parse_retry_after(headers),
    )


async def read_capped(resp: httpx.Response, cap: int) -> bytes:
    buf = bytearray()
    async for chunk in resp.aiter_bytes():
        buf += chunk
        if len(buf) >= cap:
            break
    return bytes(buf[:cap])


async def iter_sse(
    resp: httpx.Response,
    max_chars: int | None = None,
    over: Callable[[], SummaryError] | None = None,
) -> AsyncIterator[tuple[str, str]]:
    """Server-sent events as ``(event, data)``; ``event`` is ``"message"`` when unnamed.

    httpx-sse decodes the stream (the spec's field, comment and multi-line rules) and refuses
    a 2xx that is not ``text/event-stream`` (a proxy's HTML page, say) with a clear error.
    ``max_chars``: past that many characters of stream the error ``over()`` is raised, so an
    event that never ends is not held whole."""
    source = resp if max_chars is None else _Capped(resp, max_chars, over)
    try:
        async for sse in EventSource(source).aiter_sse():  # type: ignore[arg-type]
            yield sse.event or "message", sse.data
    except SSEError as exc:
        raise SummaryError(f"not a stream of server-sent events: {exc}") from None


async def finish(events: AsyncIterator[tuple[str, str]]) -> None:
    """After the reply's last event (``[DONE]``, ``message_stop``): read the stream to its
    end, which is at once or within ``FINISH_SECONDS``. httpx puts a connection back in its
    pool only once its response was read whole; left half-read, it is closed, and the next
    summary pays a new TCP (and TLS) handshake. Whatever comes or fails meanwhile is of no
    consequence: the summary is complete; a stream that goes on is closed, as before. The wait
    ends well before the attempt's deadline: a summary read whole is never lost to it."""
    wait = FINISH_SECONDS
    deadline = _attempt.get()
    when = deadline.when() if deadline is not None else None
    if when is not None:
        wait = min(wait, (when - asyncio.get_running_loop().time()) / 2)
    if wait <= 0:
        return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(wait):
            async for _ in events:
                pass


class _Capped:
    """The response as ``EventSource`` reads it (its headers, its text), ending in an error
    once more than ``max_chars`` characters were read."""

    def __init__(
        self, resp: httpx.Response, max_chars: int, over: Callable[[], SummaryError] | None
    ) -> None:
        self._resp = resp
        self._max = max_chars
        self._over = over
        self.headers = resp.headers

    async def aiter_text(self) -> AsyncIterator[str]:
        read = 0
        async for text in self._resp.aiter_text():
            read += len(text)
            if read > self._max:
                if self._over is not None:
                    raise self._over()
                raise SummaryError(f"the stream passed {self._max} characters", retryable=True)
            yield text


def is_json_response(resp: httpx.Response) -> bool:
    ctype = resp.headers.get("content-type", "")
    return "json" in ctype and "event-stream" not in ctype


def endpoint(url: str) -> str:
    """``url`` as shown in errors: scheme, host, port and path; never userinfo or a query."""
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "<invalid URL>"
    port = f":{u.port}" if u.port is not None else ""
    return f"{u.scheme}://{u.host}{port}{u.path}"


_NO_CONNECTION = (httpx.ConnectError, httpx.ConnectTimeout)


def _transport_error(where: str, exc: httpx.TransportError, secrets: Sequence[str]) -> SummaryError:
    detail = trim(redact(str(exc), secrets), 200) or type(exc).__name__
    if isinstance(exc, _NO_CONNECTION):
        # Not retried: see the module docstring.
        return SummaryError(f"{where}: cannot connect: {detail}")
    if isinstance(exc, httpx.TimeoutException):
        kind = type(exc).__name__  # ReadTimeout, WriteTimeout, PoolTimeout
        return SummaryError(f"{where}: {kind} (no data within the timeout)", retryable=True)
    if isinstance(exc, httpx.UnsupportedProtocol):
        return SummaryError(f"{where}: bad baseURL: {redact(str(exc), secrets)}")
    return SummaryError(f"{where}: connection error: {detail}", retryable=True)


class _DeadlineExceeded(SummaryError):
    """The whole ``deadline`` is spent: retryable later, never within this call."""


async def post_with_retry(
    http: httpx.AsyncClient,
    url: str,
    *,
    headers: dict[str, str],
    body: bytes,
    consume: Callable[[httpx.Response], Awaitable[T]],
    policy: RetryPolicy,
    provider: str,
    secrets: Sequence[str] = (),
    sleep: Sleep = asyncio.sleep,
    rand: Callable[[], float] = random.random,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """POST ``body`` and hand a 2xx response to ``consume`` (which reads the stream), retrying
    per the policy. ``consume`` runs afresh on every attempt."""
    start = clock()
    where = f"{provider} ({endpoint(url)})"
    timeout = httpx.Timeout(policy.timeout)
    exceeded = f"{where}: deadline of {policy.deadline:g}s exceeded"

    async def once() -> T:
        """One POST: a non-2xx status is an error carrying its body, a 2xx goes to ``consume``."""
        async with http.stream("POST", url, headers=headers, content=body, timeout=timeout) as resp:
            if not 200 <= resp.status_code < 300:
                raw = await read_capped(resp, ERROR_BODY_CAP)
                raise status_error(where, resp.status_code, raw, resp.headers, secrets)
            return await consume(resp)

    async def attempt() -> T:
        remaining = policy.deadline - (clock() - start)
        if remaining <= 0:
            raise _DeadlineExceeded(exceeded, retryable=True)
        cm = asyncio.timeout(remaining)
        entered = _attempt.set(cm)
        try:
            async with cm:
                return await once()
        except TimeoutError:
            if not cm.expired():
                raise
            raise _DeadlineExceeded(exceeded, retryable=True) from None
        except SummaryError as exc:
            if where in exc.message:
                raise
            raise _located(exc, where) from None
        except httpx.TransportError as exc:
            raise _transport_error(where, exc, secrets) from None
        except httpx.HTTPError as exc:  # e.g. a body that fails to decode: not transient
            detail = trim(redact(str(exc), secrets), 200)
            raise SummaryError(f"{where}: {type(exc).__name__}: {detail}") from None
        finally:
            _attempt.reset(entered)

    def error(state: tenacity.RetryCallState) -> SummaryError:
        assert state.outcome is not None
        exc = state.outcome.exception()
        assert isinstance(exc, SummaryError)
        return exc

    def wait(state: tenacity.RetryCallState) -> float:
        err = error(state)
        if err.retry_after is not None:
            return err.retry_after
        return policy.backoff(state.attempt_number - 1, rand)

    def stop(state: tenacity.RetryCallState) -> bool:
        if state.attempt_number > policy.max_retries:
            return True
        return (clock() - start) + (state.upcoming_sleep or 0.0) >= policy.deadline

    def give_up(state: tenacity.RetryCallState) -> T:
        err = error(state)
        if state.attempt_number > policy.max_retries:
            raise err
        raise SummaryError(
            f"{err.message} (no retry: waiting {state.upcoming_sleep:g}s would pass the "
            f"{policy.deadline:g}s deadline)",
            retryable=True,
            status=err.status,
            retry_after=err.retry_after,
        )

    def before_sleep(state: tenacity.RetryCallState) -> None:
        log.info(
            "%s; retry %d/%d in %.2fs",
            error(state).message,
            state.attempt_number,
            policy.max_retries,
            state.upcoming_sleep,
        )

    retrying = tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(
            lambda e: (
                isinstance(e, SummaryError) and e.retryable and not isinstance(e, _DeadlineExceeded)
            )
        ),
        wait=wait,
        stop=stop,
        sleep=sleep,
        before_sleep=before_sleep,
        retry_error_callback=give_up,
    )
    result: T = await retrying(attempt)
    return result


def _located(exc: SummaryError, where: str) -> SummaryError:
    """A writer's in-band error (``openai: ...``) with the endpoint it came from."""
    name = where.split(" ", 1)[0]
    message = exc.message.removeprefix(f"{name}: ")
    return SummaryError(
        f"{where}: {message}",
        retryable=exc.retryable,
        status=exc.status,
        retry_after=exc.retry_after,
    )
