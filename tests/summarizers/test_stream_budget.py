"""Issue 32 item 8: a streamed summary is bounded by its budget.

A provider (a real HTTP server on 127.0.0.1) streams a summary that never ends: text without
end, in one event after another, or one event that never closes. The writer cuts the stream
once its text passes ``max_tokens`` x ``STREAM_CHARS_PER_TOKEN`` characters (or the stream's
bytes pass their own bound) and treats it as a failed attempt: retried by the usual rules, then
failing with a reason that names the budget. The server's loop is bounded: a writer that did
not cut the stream would read it to the end and fail otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from sidecar.summarizers._http import STREAM_CHARS_PER_TOKEN
from sidecar.summarizers.base import SummaryError

from . import test_anthropic_writer as anthropic
from . import test_openai_writer as openai
from .helpers import SleepRecorder
from .httpserver import Reply, ScriptedServer

MAX_TOKENS = 500
BUDGET = MAX_TOKENS * STREAM_CHARS_PER_TOKEN  # characters
PIECE = "word " * 20  # 100 characters an event
EVENTS = 100_000  # the server's bound: 10 MB of text, 500 times the budget


class Endless:
    """The events of a stream that would go on (bounded at ``EVENTS``), counting those made."""

    def __init__(self, head: list[Any], event: Callable[[int], Any]) -> None:
        self.head = head
        self.event = event
        self.made = 0

    def __iter__(self) -> Iterator[Any]:
        yield from self.head
        for i in range(EVENTS):
            self.made += 1
            yield self.event(i)


def _openai_text() -> Endless:
    return Endless([openai.chunk("")], lambda i: openai.chunk(PIECE))


def _anthropic_text() -> Endless:
    head = [anthropic.message_start(), ("content_block_start", _block_start())]
    return Endless(head, lambda i: anthropic.delta(PIECE))


def _block_start() -> dict[str, Any]:
    block = {"type": "text", "text": ""}
    return {"type": "content_block_start", "index": 0, "content_block": block}


def _one_open_event() -> Endless:
    """``data:`` lines of one event that is never closed by a blank line."""
    return Endless(['data: {"x": "\n'], lambda i: "data: " + PIECE + "\n")


WRITERS = {"openai": openai, "anthropic": anthropic}


@pytest.mark.parametrize(
    ("provider", "endless"),
    [
        ("openai", _openai_text),
        ("anthropic", _anthropic_text),
        ("openai", _one_open_event),
        ("anthropic", _one_open_event),
    ],
    ids=["openai-text", "anthropic-text", "openai-open-event", "anthropic-open-event"],
)
async def test_an_endless_stream_is_cut_at_its_budget_and_retried(
    server: ScriptedServer,
    http: httpx.AsyncClient,
    provider: str,
    endless: Callable[[], Endless],
) -> None:
    module = WRITERS[provider]
    streams = [endless(), endless()]
    server.script(*(Reply(events=s) for s in streams))  # type: ignore[arg-type]
    sleeper = SleepRecorder()
    w = module.writer(server, http, sleeper, max_retries=1)
    with pytest.raises(SummaryError) as info:
        await w.summarize(module.req(max_tokens=MAX_TOKENS))
    assert "budget" in str(info.value) and str(MAX_TOKENS) in str(info.value)
    assert len(server.requests) == 2  # a failed attempt: retried as usual (max_retries 1)
    assert len(sleeper.delays) == 1
    for s in streams:
        assert s.made < EVENTS  # cut: never read to the end


async def test_a_summary_within_its_budget_is_kept_whole(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    text = "x" * (BUDGET - 10)
    server.script(openai.stream(text))
    result = await openai.writer(server, http).summarize(openai.req(max_tokens=MAX_TOKENS))
    assert result.text == text
