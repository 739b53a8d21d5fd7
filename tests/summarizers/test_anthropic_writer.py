"""The Anthropic Messages writer against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

from sidecar.model.config import SummarizerConfig
from sidecar.summarizers import base as prompts
from sidecar.summarizers.anthropic import PLACEHOLDER_USER, AnthropicSummarizer
from sidecar.summarizers.base import EmptySummaryError, SummaryError, SummaryRequest
from sidecar.summarizers.factory import build_summarizer

from .helpers import SleepRecorder, assistant, summary_request, user, writer_config
from .httpserver import Reply, ScriptedServer

KEY = "sk-ant-api03-SECRET-abcdefghijklmnop"
ENV = {"ANTHROPIC_KEY": KEY}

RENDERED_ENDS_ASSISTANT = [
    {"role": "user", "content": [{"type": "text", "text": "Refactor the lexer"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Done, tests pass."}]},
]
RENDERED_ENDS_USER = [
    {"role": "user", "content": "Read the config"},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"filePath": "a.toml"}}
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "[x]\ny = 1"}],
    },
]


PROVIDER = {"provider": "anthropic", "model": "claude-test", "api_key_env": "ANTHROPIC_KEY"}


def cfg(server: ScriptedServer, **kw: Any) -> SummarizerConfig:
    return writer_config({**PROVIDER, "base_url": server.url}, **kw)


def req(**kw: Any) -> SummaryRequest:
    history = [user("Refactor the lexer"), assistant("Done")]
    return summary_request(
        {"history": history, "rendered": RENDERED_ENDS_ASSISTANT, "max_tokens": 4096}, **kw
    )


def writer(
    server: ScriptedServer, http: httpx.AsyncClient, sleeper: SleepRecorder | None = None, **kw: Any
) -> AnthropicSummarizer:
    return AnthropicSummarizer(
        cfg(server, **kw), http=http, env=ENV, sleep=sleeper or SleepRecorder(), rand=lambda: 1.0
    )


def message_start(input_tokens: int = 900, read: int = 300, write: int = 40) -> tuple[str, dict]:
    usage = {
        "input_tokens": input_tokens,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
        "output_tokens": 1,
    }
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-test",
                "stop_reason": None,
                "usage": usage,
            },
        },
    )


def delta(text: str) -> tuple[str, dict]:
    return (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
    )


def stream(*pieces: str, output_tokens: int = 77, **start: int) -> Reply:
    events: list[Any] = [
        message_start(**start),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        ),
        ("ping", {"type": "ping"}),
    ]
    events += [delta(p) for p in pieces]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Reply(events=events)


async def test_exact_request_streaming_and_usage(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    pieces = [f"part{i} " for i in range(40)]
    server.script(stream(*pieces, output_tokens=77, input_tokens=900, read=300, write=40))
    progress: list[int] = []
    result = await writer(server, http).summarize(req(), progress.append)

    assert result.text == "".join(pieces).strip()
    assert len(progress) == 40
    assert (result.provider_id, result.model_id) == ("anthropic", "claude-test")
    assert result.tokens.input == 900
    assert result.tokens.cache.read == 300
    assert result.tokens.cache.write == 40
    assert result.tokens.output == 77

    [sent] = server.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    body = sent.json()
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 4096
    assert body["stream"] is True
    assert "tools" not in body and "tool_choice" not in body
    assert "Provide a detailed but concise summary of the conversation." in body["system"]
    assert prompts.NO_TOOLS in body["system"]
    messages = body["messages"]
    assert messages[:2] == RENDERED_ENDS_ASSISTANT
    assert messages[2] == {
        "role": "user",
        "content": [{"type": "text", "text": prompts.DEFAULT_PROMPT}],
    }


async def test_summaries_in_a_row_share_one_connection(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    """Read to its end after ``message_stop``: the connection goes back to the pool."""
    server.script(stream("first"), stream("second"))
    w = writer(server, http)
    assert [(await w.summarize(req())).text for _ in range(2)] == ["first", "second"]
    assert server.connections == 1


async def test_prompt_joins_a_trailing_user_message(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(stream("ok"))
    await writer(server, http).summarize(req(rendered=RENDERED_ENDS_USER))
    messages = server.requests[0].json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    last = messages[-1]["content"]
    assert last[0]["type"] == "tool_result"
    assert last[-1] == {"type": "text", "text": prompts.DEFAULT_PROMPT}
    # The request's own rendered list was not mutated.
    assert RENDERED_ENDS_USER[-1]["content"][-1]["type"] == "tool_result"


async def test_reference_previous_and_leading_assistant(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(stream("ok"))
    rendered = [{"role": "assistant", "content": "summary of before"}]
    reference_rendered = [
        {"role": "user", "content": [{"type": "text", "text": "please also add docs"}]}
    ]
    await writer(server, http).summarize(
        req(
            rendered=rendered,
            reference_rendered=reference_rendered,
            previous_summaries=["EARLIER ONE"],
        )
    )
    messages = server.requests[0].json()["messages"]
    assert messages[0] == {"role": "user", "content": PLACEHOLDER_USER}
    assert messages[1] == rendered[0]
    blocks = messages[2]["content"]
    assert messages[2]["role"] == "user" and len(blocks) == 3
    assert blocks[0]["text"].startswith(prompts.REFERENCE_INSTRUCTION)
    assert "please also add docs" in blocks[0]["text"]
    assert (
        blocks[1]["text"].startswith(prompts.MERGE_INSTRUCTION)
        and "EARLIER ONE" in blocks[1]["text"]
    )
    assert blocks[2]["text"] == prompts.DEFAULT_PROMPT


async def test_base_url_with_v1_suffix(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    server.script(stream("ok"))
    await writer(server, http, base_url=server.url + "/v1/").summarize(req())
    assert server.requests[0].path == "/v1/messages"


async def test_overloaded_529_then_success(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    sleeper = SleepRecorder()
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.script(Reply(529, body=overloaded), Reply(429, body=overloaded), stream("ok"))
    result = await writer(server, http, sleeper).summarize(req())
    assert result.text == "ok"
    assert len(server.requests) == 3
    assert sleeper.delays == [0.5, 1.0]  # rand()=1.0: the full exponential bound


async def test_in_band_error_event(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    sleeper = SleepRecorder()
    err = ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    server.script(Reply(events=[message_start(), delta("half"), err]), stream("whole"))
    result = await writer(server, http, sleeper).summarize(req())
    assert result.text == "whole"
    assert len(server.requests) == 2

    bad = ("error", {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}})
    server.script(Reply(events=[message_start(), bad]))
    with pytest.raises(SummaryError) as info:
        await writer(server, http, sleeper).summarize(req())
    assert "invalid_request_error" in str(info.value) and not info.value.retryable


async def test_401_not_retried_and_key_not_leaked(
    server: ScriptedServer, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = {
        "type": "error",
        "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
    }
    server.script(Reply(401, body=body))
    with pytest.raises(SummaryError) as info:
        await writer(server, http).summarize(req())
    assert len(server.requests) == 1
    assert info.value.status == 401 and not info.value.retryable
    assert "invalid x-api-key" in str(info.value)
    for text in (str(info.value), repr(info.value), caplog.text):
        assert KEY not in text and "SECRET" not in text


async def test_timeout(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    server.script(Reply(events=[message_start(), 2.0, delta("late")]))
    with pytest.raises(SummaryError) as info:
        await writer(server, http, timeout=0.2, max_retries=0).summarize(req())
    assert "ReadTimeout" in str(info.value)


async def test_cancel_mid_stream(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    server.script(Reply(events=[message_start(), delta("some text"), 30.0, delta("never")]))
    started = asyncio.Event()
    task = asyncio.create_task(writer(server, http).summarize(req(), lambda _chars: started.set()))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(server.client_gone.wait(), 2)


async def test_thinking_only_is_empty(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    thinking = (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "let me think"},
        },
    )
    server.script(
        Reply(events=[message_start(), thinking, ("message_stop", {"type": "message_stop"})])
    )
    with pytest.raises(EmptySummaryError):
        await writer(server, http).summarize(req())


async def test_non_streaming_json_reply(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    body = {
        "type": "message",
        "content": [{"type": "text", "text": "all at once"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 12, "output_tokens": 3, "cache_read_input_tokens": 5},
    }
    server.script(Reply(body=body))
    result = await writer(server, http).summarize(req())
    assert result.text == "all at once"
    assert (result.tokens.input, result.tokens.output, result.tokens.cache.read) == (12, 3, 5)


def test_factory() -> None:
    w = build_summarizer(
        SummarizerConfig(provider="anthropic", model="claude-x", max_input_tokens=180_000), env={}
    )
    assert isinstance(w, AnthropicSummarizer)
    assert w.wire_format == "anthropic"
    assert w.input_limit() == 180_000
    assert w.url == "https://api.anthropic.com/v1/messages"


async def test_stream_cut_before_message_stop(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(Reply(events=[message_start(), delta("half")]))
    with pytest.raises(SummaryError, match="stream ended") as info:
        await writer(server, http, max_retries=0).summarize(req())
    assert info.value.retryable
