"""The OpenAI-compatible writer against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import httpx
import pytest

from sidecar.model.config import SummarizerConfig
from sidecar.summarizers import _retry
from sidecar.summarizers.base import (
    DEFAULT_PROMPT,
    MERGE_INSTRUCTION,
    NO_TOOLS,
    REFERENCE_INSTRUCTION,
    EmptySummaryError,
    SummaryError,
    SummaryRequest,
)
from sidecar.summarizers.factory import build_summarizer
from sidecar.summarizers.openai import OpenAISummarizer

from .helpers import SleepRecorder, assistant, summary_request, user, writer_config
from .httpserver import Reply, ScriptedServer

KEY = "sk-test-SECRET-0123456789abcdef"
ENV = {"SUMMARY_KEY": KEY}

RENDERED = [
    {"role": "user", "content": "Fix the parser bug in src/parse.py"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read", "arguments": '{"filePath": "src/parse.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "def parse(): ..."},
    {"role": "assistant", "content": "Found it: an off-by-one in parse()."},
]


PROVIDER = {"provider": "openai", "model": "gpt-test", "api_key_env": "SUMMARY_KEY"}


def cfg(server: ScriptedServer, **kw: Any) -> SummarizerConfig:
    return writer_config({**PROVIDER, "base_url": server.url + "/v1"}, **kw)


def req(**kw: Any) -> SummaryRequest:
    history = [user("Fix the parser bug"), assistant("Found it")]
    return summary_request({"history": history, "rendered": RENDERED, "max_tokens": 1234}, **kw)


def writer(
    server: ScriptedServer, http: httpx.AsyncClient, sleeper: SleepRecorder | None = None, **kw: Any
) -> OpenAISummarizer:
    return OpenAISummarizer(
        cfg(server, **kw), http=http, env=ENV, sleep=sleeper or SleepRecorder(), rand=lambda: 0.5
    )


def chunk(content: str | None = None, *, finish: str | None = None, **extra: Any) -> dict:
    delta = {} if content is None else {"content": content}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def usage(prompt: int = 1000, completion: int = 50, cached: int = 0) -> dict:
    return {
        "id": "chatcmpl-1",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": 7},
        },
    }


def stream(*pieces: str, use: dict | None = None, delay: float = 0.0) -> Reply:
    events: list[Any] = [chunk("")]  # the role-only first chunk many servers send
    events += [chunk(p) for p in pieces]
    events += [chunk(finish="stop"), use or usage(), "data: [DONE]\n\n"]
    return Reply(events=events, delay=delay)


async def test_exact_request_and_streaming_assembly(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    words = [f"word{i} " for i in range(60)]
    server.script(stream(*words))
    progress: list[int] = []
    result = await writer(server, http).summarize(req(), progress.append)

    assert result.text == "".join(words).strip()
    assert progress == sorted(progress) and progress[-1] == len("".join(words))
    assert len(progress) == 60
    assert (result.provider_id, result.model_id) == ("openai", "gpt-test")

    [sent] = server.requests
    assert sent.method == "POST"
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"] == "application/json"
    body = sent.json()
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 1234
    assert "tools" not in body and "tool_choice" not in body
    messages = body["messages"]
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith("You are a helpful AI assistant")
    assert "Provide a detailed but concise summary of the conversation." in messages[0]["content"]
    assert NO_TOOLS in messages[0]["content"]
    assert messages[1:-1] == RENDERED
    assert messages[-1] == {"role": "user", "content": DEFAULT_PROMPT}


async def test_summaries_in_a_row_share_one_connection(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    """The stream is read to its end after ``[DONE]``, so the connection goes back to the
    pool: the next compaction's request skips a new TCP (and, to a real provider, TLS)
    handshake."""
    server.script(stream("first"), stream("second"), stream("third"))
    w = writer(server, http)
    texts = [(await w.summarize(req())).text for _ in range(3)]
    assert texts == ["first", "second", "third"]
    assert server.connections == 1


async def test_a_stream_that_goes_on_after_done_is_left(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    """A server that keeps the stream open after ``[DONE]`` does not hold the summary: the
    rest is read for a moment only, then the connection is closed, as a half-read one is."""
    reply = stream("done anyway")
    assert reply.events is not None
    reply.events.append(3600.0)  # the stream's end comes an hour later
    server.script(reply, stream("next"))
    w = writer(server, http)
    async with asyncio.timeout(60):  # a hang guard, far above the wait for the rest
        assert (await w.summarize(req())).text == "done anyway"
        await server.client_gone.wait()  # it closed that connection
        assert (await w.summarize(req())).text == "next"
    assert server.connections == 2


async def test_waiting_for_the_end_of_a_stream_never_costs_a_finished_summary(
    server: ScriptedServer, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait for a stream's end after ``[DONE]`` stays inside the attempt's deadline: a
    summary read whole is returned even when the deadline is nearer than that wait."""
    monkeypatch.setattr(_retry, "FINISH_SECONDS", 30.0)
    reply = stream("in time")
    assert reply.events is not None
    reply.events.append(3600.0)  # the stream's end never comes
    server.script(reply)
    w = writer(server, http, timeout=10.0, deadline=2.0)  # nearer than ``FINISH_SECONDS``
    async with asyncio.timeout(60):  # a hang guard
        assert (await w.summarize(req())).text == "in time"


async def test_usage_capture_moves_cached_tokens_out_of_input(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(stream("summary", use=usage(prompt=1000, completion=50, cached=600)))
    result = await writer(server, http).summarize(req())
    assert result.tokens.input == 400
    assert result.tokens.cache.read == 600
    assert result.tokens.cache.write == 0
    assert result.tokens.output == 50
    assert result.tokens.reasoning == 7


async def test_missing_usage_is_estimated(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    server.script(Reply(events=[chunk("abcdefgh"), "data: [DONE]\n\n"]))
    result = await writer(server, http).summarize(req())
    assert result.tokens.output == 2
    assert result.tokens.input > 0


async def test_reference_and_previous_summaries_blocks(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(stream("merged"))
    reference = [user("Now also handle unicode"), assistant("Looking at the lexer")]
    await writer(server, http).summarize(
        req(previous_summaries=["OLD SUMMARY ONE", "OLD SUMMARY TWO"], reference=reference)
    )
    messages = server.requests[0].json()["messages"]
    assert messages[1:5] == RENDERED
    ref, prev, prompt = messages[5:]
    assert ref["role"] == "user" and ref["content"].startswith(REFERENCE_INSTRUCTION)
    assert "Now also handle unicode" in ref["content"]
    assert "Looking at the lexer" in ref["content"]
    assert prev["role"] == "user" and prev["content"].startswith(MERGE_INSTRUCTION)
    assert prev["content"].index("OLD SUMMARY ONE") < prev["content"].index("OLD SUMMARY TWO")
    assert prompt == {"role": "user", "content": DEFAULT_PROMPT}


async def test_no_key_no_authorization_header_and_extra_headers(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(stream("ok"))
    w = OpenAISummarizer(
        cfg(server, api_key_env=None, headers={"X-Title": "sidecar"}), http=http, env={}
    )
    await w.summarize(req())
    sent = server.requests[0]
    assert "authorization" not in sent.headers
    assert sent.headers["x-title"] == "sidecar"


async def test_non_streaming_json_reply_is_accepted(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    body = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2},
    }
    server.script(Reply(body=body))
    result = await writer(server, http).summarize(req())
    assert result.text == "whole"
    assert (result.tokens.input, result.tokens.output) == (10, 2)


async def test_429_with_retry_after_then_success(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    sleeper = SleepRecorder()
    server.script(
        Reply(429, headers={"retry-after": "7"}, body={"error": {"message": "slow down"}}),
        Reply(503, body="overloaded"),
        stream("finally"),
    )
    result = await writer(server, http, sleeper).summarize(req())
    assert result.text == "finally"
    assert len(server.requests) == 3
    assert sleeper.delays[0] == 7.0  # Retry-After honoured
    assert sleeper.delays[1] == pytest.approx(0.5 * 0.5 * 2)  # full jitter, 2nd retry
    assert all(r.json() == server.requests[0].json() for r in server.requests)


async def test_retry_after_http_date(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    import email.utils
    import time

    sleeper = SleepRecorder()
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    server.script(Reply(429, headers={"retry-after": when}, body="busy"), stream("ok"))
    await writer(server, http, sleeper).summarize(req())
    assert 17 <= sleeper.delays[0] <= 20.5


async def test_retry_after_beyond_deadline_gives_up(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    sleeper = SleepRecorder()
    server.script(Reply(429, headers={"retry-after": "3600"}, body="busy"), stream("never"))
    with pytest.raises(SummaryError) as info:
        await writer(server, http, sleeper).summarize(req())
    assert info.value.status == 429 and info.value.retryable
    assert "deadline" in str(info.value)
    assert len(server.requests) == 1 and sleeper.delays == []


async def test_permanent_500_raises_after_max_retries(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    sleeper = SleepRecorder()
    server.script(*[Reply(500, body={"error": {"message": "boom"}}) for _ in range(5)])
    with pytest.raises(SummaryError) as info:
        await writer(server, http, sleeper, max_retries=2).summarize(req())
    assert len(server.requests) == 3
    assert info.value.status == 500
    assert info.value.retryable
    assert "500" in str(info.value) and "boom" in str(info.value)
    assert sleeper.delays == [pytest.approx(0.25), pytest.approx(0.5)]


async def test_400_is_not_retried(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    server.script(
        Reply(400, body={"error": {"message": "context_length_exceeded", "type": "invalid"}}),
        stream("unused"),
    )
    with pytest.raises(SummaryError) as info:
        await writer(server, http).summarize(req())
    assert len(server.requests) == 1
    assert info.value.status == 400 and not info.value.retryable
    assert "context_length_exceeded" in str(info.value)


async def test_max_completion_tokens_fallback(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    message = (
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead."
    )
    server.script(Reply(400, body={"error": {"message": message}}), stream("ok"))
    result = await writer(server, http).summarize(req())
    assert result.text == "ok"
    first, second = (r.json() for r in server.requests)
    assert first["max_tokens"] == 1234 and "max_completion_tokens" not in first
    assert second["max_completion_tokens"] == 1234 and "max_tokens" not in second


async def test_stall_longer_than_timeout(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    server.script(Reply(stall=2.0, events=[chunk("late")]))
    with pytest.raises(SummaryError) as info:
        await writer(server, http, timeout=0.2, max_retries=0).summarize(req())
    assert "ReadTimeout" in str(info.value)
    assert info.value.retryable


async def test_stall_mid_stream_then_retry_succeeds(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(Reply(events=[chunk("partial "), 2.0, chunk("never")]), stream("complete"))
    progress: list[int] = []
    result = await writer(server, http, timeout=0.2, max_retries=1).summarize(
        req(), progress.append
    )
    assert result.text == "complete"  # the partial first attempt is discarded
    assert len(server.requests) == 2


async def test_total_deadline(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    # Each event arrives within the read timeout, but the whole stream takes too long.
    events: list[Any] = [chunk("x")]
    for _ in range(20):
        events += [0.1, chunk("x")]
    server.script(Reply(events=events))
    with pytest.raises(SummaryError) as info:
        await writer(server, http, timeout=1.0, deadline=0.5).summarize(req())
    assert "deadline" in str(info.value)


def _refused_port() -> int:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()  # nothing listens there
    return port


async def test_connection_refused_fails_fast_and_names_the_endpoint(
    http: httpx.AsyncClient,
) -> None:
    """Issue 20 item 5: a refused connection is not retried (a server that is not there will
    not be there in 2 s either), and the error says where the writer tried to connect."""
    port = _refused_port()
    sleeper = SleepRecorder()
    config = SummarizerConfig(
        provider="openai",
        model="m",
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key_env="SUMMARY_KEY",
        max_retries=4,
    )
    w = OpenAISummarizer(config, http=http, env=ENV, sleep=sleeper)
    with pytest.raises(SummaryError) as info:
        await w.summarize(req())
    message = str(info.value)
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in message
    assert "cannot connect" in message
    assert KEY not in message
    assert sleeper.delays == []


async def test_endpoint_in_errors_drops_userinfo_and_query(http: httpx.AsyncClient) -> None:
    port = _refused_port()
    config = SummarizerConfig(
        provider="openai", model="m", base_url=f"http://user:hunter2@127.0.0.1:{port}/v1"
    )
    w = OpenAISummarizer(config, http=http, env={}, sleep=SleepRecorder())
    with pytest.raises(SummaryError) as info:
        await w.summarize(req())
    assert "hunter2" not in str(info.value)
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in str(info.value)


async def test_server_error_names_the_endpoint(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(Reply(status=400, body={"error": {"message": "bad model"}}))
    with pytest.raises(SummaryError) as info:
        await writer(server, http).summarize(req())
    assert f"{server.url}/v1/chat/completions" in str(info.value)
    assert "bad model" in str(info.value)


async def test_cancel_mid_stream_closes_the_connection(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(Reply(events=[chunk("first "), chunk("second "), 30.0, chunk("never")]))
    got_text = asyncio.Event()

    def progress(chars: int) -> None:
        if chars >= len("first second "):
            got_text.set()

    task = asyncio.create_task(writer(server, http).summarize(req(), progress))
    await asyncio.wait_for(got_text.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(server.client_gone.wait(), 2)
    assert server.aborted == 1


async def test_key_never_leaks_into_errors_or_logs(
    server: ScriptedServer, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}. Bearer {KEY}"}}
    server.script(
        Reply(503, body=echo),  # retried: logged
        Reply(401, body=echo),  # permanent
    )
    with pytest.raises(SummaryError) as info:
        await writer(server, http).summarize(req())
    err = info.value
    assert err.status == 401
    for text in (str(err), repr(err), repr(err.args), err.message, caplog.text):
        assert KEY not in text
        assert "SECRET" not in text
    assert "Incorrect API key provided" in str(err)
    assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"
    assert "retry 1/3" in caplog.text  # the retry was logged, without the key


async def test_successful_run_logs_no_key(
    server: ScriptedServer, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.script(stream("fine"))
    await writer(server, http).summarize(req())
    assert caplog.records  # httpx/httpcore and our own debug lines were captured
    assert KEY not in caplog.text


async def test_in_band_stream_error(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    server.script(
        Reply(events=[chunk("a"), {"error": {"message": "bad request", "type": "invalid"}}])
    )
    with pytest.raises(SummaryError) as info:
        await writer(server, http).summarize(req())
    assert "bad request" in str(info.value) and not info.value.retryable


@pytest.mark.parametrize(
    "events",
    [
        [chunk(""), chunk("   "), chunk("\n"), chunk(finish="stop"), "data: [DONE]\n\n"],
        # A reasoning model that only thinks (OpenCode #41571).
        [
            {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]},
            chunk(finish="stop"),
            "data: [DONE]\n\n",
        ],
        # The model tried to call a tool although none were offered (OpenCode #18053).
        [
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"name": "_noop"}}]},
                        "finish_reason": "tool_calls",
                    }
                ]
            },
            "data: [DONE]\n\n",
        ],
    ],
)
async def test_empty_summary_is_rejected(
    server: ScriptedServer, http: httpx.AsyncClient, events: list[Any]
) -> None:
    server.script(Reply(events=events))
    with pytest.raises(EmptySummaryError):
        await writer(server, http).summarize(req())
    assert len(server.requests) == 1


async def test_build_summarizer_owns_its_client_when_none_is_given(
    server: ScriptedServer,
) -> None:
    server.script(stream("own client"))
    w = build_summarizer(cfg(server), env=ENV)
    assert isinstance(w, OpenAISummarizer)
    assert w.wire_format == "openai"
    try:
        assert (await w.summarize(req())).text == "own client"
    finally:
        await w.aclose()
    assert w._http is None


async def test_shared_client_is_not_closed(server: ScriptedServer, http: httpx.AsyncClient) -> None:
    server.script(stream("one"), stream("two"))
    w = build_summarizer(cfg(server, max_input_tokens=50_000), http=http, env=ENV)
    assert w.input_limit() == 50_000
    await w.summarize(req())
    await w.aclose()
    assert not http.is_closed
    assert (await w.summarize(req())).text == "two"


def test_model_is_required() -> None:
    with pytest.raises(ValueError, match="model"):
        build_summarizer(SummarizerConfig(provider="openai"))


async def test_stream_cut_without_end_marker_is_retried(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    cut = Reply(events=[chunk("half a summ")])  # cleanly closed, but no finish / [DONE]
    server.script(cut, stream("the whole summary"))
    result = await writer(server, http).summarize(req())
    assert result.text == "the whole summary"
    assert len(server.requests) == 2

    server.script(Reply(events=[chunk("half")]))
    with pytest.raises(SummaryError, match="stream ended") as info:
        await writer(server, http, max_retries=0).summarize(req())
    assert info.value.retryable


async def test_finish_reason_without_done_is_complete(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(Reply(events=[chunk("done"), chunk(finish="length")]))
    result = await writer(server, http).summarize(req())
    assert result.text == "done"


class _Lookups:
    """A ``sys.meta_path`` finder that records the modules looked for and finds none: each is
    an import the module cache did not answer (a path search, ~25 us, even when it fails)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        self.names.append(name)


async def test_a_summary_after_the_first_imports_nothing(
    server: ScriptedServer, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpcore asks ``import sniffio`` on every request and stream; were sniffio missing,
    each ask would search ``sys.path`` again (a failed import is not cached), about seven
    searches per compaction."""
    w = writer(server, http)
    server.script(stream("first "))
    await w.summarize(req(), lambda _n: None)
    lookups = _Lookups()
    monkeypatch.setattr(sys, "meta_path", [lookups, *sys.meta_path])
    server.script(stream("second "))
    result = await w.summarize(req(), lambda _n: None)
    assert result.text == "second"
    assert lookups.names == []
