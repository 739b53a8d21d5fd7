"""Summaries from any OpenAI-compatible chat-completions server (OpenAI, Ollama, vLLM, llama.cpp,
LM Studio): ``POST {baseURL}/chat/completions`` streamed as server-sent events, no tools."""

from __future__ import annotations

import logging
from typing import Any, Literal

import httpx
import msgspec

from sidecar.model.tokens import CacheTokens, Tokens
from sidecar.summarizers._http import HttpSummarizer, StreamState, as_dict, count
from sidecar.summarizers._retry import (
    JSON_BODY_CAP,
    finish,
    is_json_response,
    iter_sse,
    read_capped,
)
from sidecar.summarizers._text import redact, trim
from sidecar.summarizers.base import Progress, SummaryError, SummaryRequest, chat_messages

log = logging.getLogger("sidecar.summarizers")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRYABLE_CODES = ("server_error", "rate_limit", "overloaded", "timeout", "unavailable")


def usage_tokens(usage: dict[str, Any]) -> Tokens:
    """OpenAI usage -> Tokens. ``prompt_tokens`` includes cached tokens, so they are moved out of
    ``input`` into ``cache.read`` (OpenCode #4416: otherwise they are counted twice)."""
    prompt = count(usage.get("prompt_tokens"))
    cached = count(as_dict(usage.get("prompt_tokens_details")).get("cached_tokens"))
    reasoning = count(as_dict(usage.get("completion_tokens_details")).get("reasoning_tokens"))
    return Tokens(
        input=max(0, prompt - cached),
        output=count(usage.get("completion_tokens")),
        reasoning=reasoning,
        cache=CacheTokens(read=cached),
    )


class OpenAISummarizer(HttpSummarizer):
    provider_id = "openai"
    wire_format: Literal["openai"] = "openai"
    default_base_url = DEFAULT_BASE_URL

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def key_header(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def body(self, req: SummaryRequest, *, token_field: str = "max_tokens") -> dict[str, Any]:
        messages = [{"role": "system", "content": req.writer_system}, *chat_messages(req)]
        return {
            "model": self.model_id,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            token_field: req.max_tokens,
        }

    async def send(
        self, req: SummaryRequest, progress: Progress | None
    ) -> tuple[StreamState, dict[str, Any]]:
        try:
            return await super().send(req, progress)
        except SummaryError as exc:
            # Newer OpenAI models reject ``max_tokens`` and want ``max_completion_tokens``.
            if exc.status != 400 or "max_completion_tokens" not in exc.message:
                raise
            log.info("openai: retrying the summary with max_completion_tokens")
            body = self.body(req, token_field="max_completion_tokens")
            return await self.post(body, progress, req.max_tokens), body

    async def consume(self, resp: httpx.Response, state: StreamState) -> StreamState:
        if is_json_response(resp):  # a server that ignored "stream": true
            raw = await read_capped(resp, JSON_BODY_CAP)
            self._apply_full(_decode(raw), state)
            state.completed = True
            return state
        events = iter_sse(resp, state.max_stream_chars, state.over_budget)
        async for _event, data in events:
            if data.strip() == "[DONE]":
                state.completed = True
                await finish(events)
                break
            for chunk in _decode_chunks(data):
                self._apply_chunk(chunk, state)
        return state.check_complete(self.provider_id)

    def _apply_chunk(self, chunk: Any, state: StreamState) -> None:
        if not isinstance(chunk, dict):
            return
        self._check_error(chunk)
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                content = as_dict(choice.get("delta")).get("content")
                if isinstance(content, str):
                    state.add(content)
                if choice.get("finish_reason"):
                    state.finish = str(choice["finish_reason"])
                    state.completed = True  # some servers never send [DONE]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            state.tokens = usage_tokens(usage)

    def _apply_full(self, data: Any, state: StreamState) -> None:
        if not isinstance(data, dict):
            return
        self._check_error(data)
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            content = as_dict(choices[0].get("message")).get("content")
            if isinstance(content, str):
                state.add(content)
            if choices[0].get("finish_reason"):
                state.finish = str(choices[0]["finish_reason"])
        if isinstance(data.get("usage"), dict):
            state.tokens = usage_tokens(data["usage"])

    def _check_error(self, chunk: dict[str, Any]) -> None:
        err = chunk.get("error")
        if not err:
            return
        if isinstance(err, dict):
            message = str(err.get("message") or err.get("type") or err.get("code") or "error")
            kind = f"{err.get('type', '')} {err.get('code', '')}".lower()
        else:
            message, kind = str(err), str(err).lower()
        raise SummaryError(
            f"openai stream error: {trim(redact(message, self.secrets()), 300)}",
            retryable=any(code in kind for code in _RETRYABLE_CODES),
        )


def _decode(raw: bytes | str) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        log.debug("openai: skipping an undecodable stream chunk")
        return None


def _decode_chunks(data: str) -> list[Any]:
    """One SSE ``data`` payload; tolerate servers that put several JSON lines in one event."""
    decoded = _decode(data)
    if decoded is not None or "\n" not in data:
        return [decoded]
    return [
        _decode(line) for line in data.splitlines() if line.strip() and line.strip() != "[DONE]"
    ]
