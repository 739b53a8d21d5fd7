"""Summaries from Anthropic's Messages API: ``POST {baseURL}/v1/messages``, streamed, no tools."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import httpx
import msgspec

from sidecar.model.tokens import CacheTokens, Tokens
from sidecar.summarizers._http import HttpSummarizer, StreamState, count
from sidecar.summarizers._retry import (
    JSON_BODY_CAP,
    finish,
    is_json_response,
    iter_sse,
    read_capped,
)
from sidecar.summarizers._text import redact, trim
from sidecar.summarizers.base import (
    SummaryError,
    SummaryRequest,
    extra_user_texts,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_RETRYABLE_ERRORS = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)
PLACEHOLDER_USER = "(The beginning of this conversation was compacted earlier.)"


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, list):
        return list(content)
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return []


def anthropic_messages(req: SummaryRequest) -> list[dict[str, Any]]:
    """``rendered`` followed by one user turn holding the extra blocks and the prompt.

    The API wants alternating roles starting with ``user``: when the history already ends with a
    user message (e.g. tool results) the final blocks are appended to it instead of opening a
    second user turn, and a history that opens with the assistant gets a short user opener.
    """
    messages = [copy.copy(m) for m in req.rendered]
    tail = [{"type": "text", "text": t} for t in [*extra_user_texts(req), req.prompt]]
    if messages and messages[0].get("role") != "user":
        messages.insert(0, {"role": "user", "content": PLACEHOLDER_USER})
    if messages and messages[-1].get("role") == "user":
        last = messages[-1]
        last["content"] = _blocks(last.get("content")) + tail
    else:
        messages.append({"role": "user", "content": tail})
    return messages


class AnthropicSummarizer(HttpSummarizer):
    provider_id = "anthropic"
    wire_format: Literal["anthropic"] = "anthropic"
    default_base_url = DEFAULT_BASE_URL
    base_headers: ClassVar[Mapping[str, str]] = {"anthropic-version": API_VERSION}

    @property
    def url(self) -> str:
        # Accept both "https://api.anthropic.com" and ".../v1" as baseURL.
        base = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        return f"{base}/v1/messages"

    def key_header(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def body(self, req: SummaryRequest) -> dict[str, Any]:
        return {
            "model": self.model_id,
            "max_tokens": req.max_tokens,
            "system": req.writer_system,
            "messages": anthropic_messages(req),
            "stream": True,
        }

    async def consume(self, resp: httpx.Response, state: StreamState) -> StreamState:
        usage = _Usage()
        if is_json_response(resp):  # non-streamed reply
            raw = await read_capped(resp, JSON_BODY_CAP)
            data = _decode(raw)
            if isinstance(data, dict):
                if data.get("type") == "error":
                    self._raise(data)
                for block in data.get("content") or ():
                    if isinstance(block, dict) and block.get("type") == "text":
                        state.add(str(block.get("text", "")))
                state.finish = data.get("stop_reason")
                usage.start(data.get("usage"))
            state.completed = True
        else:
            events = iter_sse(resp, state.max_stream_chars, state.over_budget)
            async for event, raw_data in events:
                data = _decode(raw_data)
                if not isinstance(data, dict):
                    continue
                kind = data.get("type", event)
                if kind == "message_start":
                    usage.start(data.get("message", {}).get("usage"))
                elif kind == "content_block_delta":
                    delta = data.get("delta") or {}
                    if delta.get("type") == "text_delta":
                        state.add(str(delta.get("text", "")))
                elif kind == "message_delta":
                    usage.delta(data.get("usage"))
                    stop = (data.get("delta") or {}).get("stop_reason")
                    if stop:
                        state.finish = str(stop)
                        state.completed = True
                elif kind == "error":
                    self._raise(data)
                elif kind == "message_stop":
                    state.completed = True
                    await finish(events)
                    break
        state.tokens = usage.tokens()
        return state.check_complete(self.provider_id)

    def _raise(self, data: dict[str, Any]) -> None:
        raw = data.get("error")
        err: dict[str, Any] = raw if isinstance(raw, dict) else {}
        kind = str(err.get("type", "error"))
        message = trim(redact(str(err.get("message", kind)), self.secrets()), 300)
        raise SummaryError(
            f"anthropic stream error {kind}: {message}", retryable=kind in _RETRYABLE_ERRORS
        )


class _Usage:
    """Anthropic partitions input: ``input_tokens`` excludes cache reads and writes."""

    def __init__(self) -> None:
        self.seen = False
        self.input = self.output = self.read = self.write = 0

    def start(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.seen = True
        self.input = count(usage.get("input_tokens"))
        self.read = count(usage.get("cache_read_input_tokens"))
        self.write = count(usage.get("cache_creation_input_tokens"))
        self.output = count(usage.get("output_tokens"))

    def delta(self, usage: Any) -> None:
        """``message_delta`` usage is cumulative; newer API versions also restate input counts."""
        if not isinstance(usage, dict):
            return
        self.seen = True
        if "output_tokens" in usage:
            self.output = count(usage["output_tokens"])
        if usage.get("input_tokens") is not None:
            self.input = count(usage["input_tokens"])
        if usage.get("cache_read_input_tokens") is not None:
            self.read = count(usage["cache_read_input_tokens"])
        if usage.get("cache_creation_input_tokens") is not None:
            self.write = count(usage["cache_creation_input_tokens"])

    def tokens(self) -> Tokens | None:
        if not self.seen:
            return None
        return Tokens(
            input=self.input,
            output=self.output,
            cache=CacheTokens(read=self.read, write=self.write),
        )


def _decode(raw: bytes | str) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
