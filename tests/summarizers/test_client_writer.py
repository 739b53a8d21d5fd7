"""The client-delegated writer: ``summarizer/complete`` through an injected callable."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from sidecar.model.config import SummarizerConfig
from sidecar.model.rpc import SummarizerCompleteParams, SummarizerCompleteResult
from sidecar.model.tokens import Tokens
from sidecar.summarizers.base import (
    COMPACTION_SYSTEM,
    DEFAULT_PROMPT,
    MERGE_INSTRUCTION,
    NO_TOOLS,
    EmptySummaryError,
    SummaryError,
    SummaryRequest,
)
from sidecar.summarizers.client import ClientSummarizer
from sidecar.summarizers.factory import build_summarizer

from .helpers import assistant, user

RENDERED = [
    {"role": "user", "content": "Plan the migration"},
    {"role": "assistant", "content": "Step 1: schema. Step 2: data."},
]


def req(**kw: Any) -> SummaryRequest:
    base: dict[str, Any] = {
        "system": COMPACTION_SYSTEM,
        "prompt": DEFAULT_PROMPT + "\n\nKeep the migration order.",
        "history": [user("Plan the migration"), assistant("Step 1")],
        "rendered": RENDERED,
        "max_tokens": 2048,
    }
    base.update(kw)
    return SummaryRequest(**base)


class Recorder:
    def __init__(self, *results: Any) -> None:
        self.calls: list[SummarizerCompleteParams] = []
        self.results = list(results)

    async def __call__(self, params: SummarizerCompleteParams) -> Any:
        self.calls.append(params)
        result = self.results.pop(0)
        if isinstance(result, BaseException):
            raise result
        return result


async def test_calls_the_client_with_the_right_params() -> None:
    call = Recorder(
        SummarizerCompleteResult(text="  the summary  ", tokens=Tokens(input=500, output=20))
    )
    w = build_summarizer(
        SummarizerConfig(provider="client", model="editor-model"), client_call=call
    )
    assert isinstance(w, ClientSummarizer) and w.wire_format == "openai"
    progress: list[int] = []
    result = await w.summarize(req(), progress.append)

    assert result.text == "the summary"
    assert result.tokens == Tokens(input=500, output=20)
    assert (result.provider_id, result.model_id) == ("client", "editor-model")
    assert progress == [len("the summary")]

    [params] = call.calls
    assert params.max_tokens == 2048
    assert params.system.startswith(COMPACTION_SYSTEM.rstrip()) and NO_TOOLS in params.system
    assert params.messages == [
        *RENDERED,
        {"role": "user", "content": DEFAULT_PROMPT + "\n\nKeep the migration order."},
    ]
    # On the wire the params are camelCase, as DESIGN §4 names them.
    wire = msgspec.json.decode(msgspec.json.encode(params))
    assert set(wire) == {"system", "messages", "maxTokens"}


async def test_previous_summaries_are_sent_before_the_prompt() -> None:
    call = Recorder({"text": "merged"})
    w = ClientSummarizer(SummarizerConfig(provider="client"), call)
    result = await w.summarize(req(previous_summaries=["S1"]))
    assert result.text == "merged"
    assert result.model_id == "client"
    assert result.tokens.output == 2 and result.tokens.input > 0  # estimated
    messages = call.calls[0].messages
    assert messages[-2]["content"].startswith(MERGE_INSTRUCTION)
    assert messages[-1]["role"] == "user"


async def test_empty_text_is_rejected() -> None:
    w = ClientSummarizer(SummarizerConfig(provider="client"), Recorder({"text": " \n "}))
    with pytest.raises(EmptySummaryError):
        await w.summarize(req())


async def test_client_errors_become_summary_errors() -> None:
    w = ClientSummarizer(SummarizerConfig(provider="client"), Recorder(RuntimeError("no model")))
    with pytest.raises(SummaryError, match="no model"):
        await w.summarize(req())
    bad = ClientSummarizer(SummarizerConfig(provider="client"), Recorder({"tokens": 3}))
    with pytest.raises(SummaryError, match="invalid result"):
        await bad.summarize(req())


async def test_deadline() -> None:
    async def never(_params: SummarizerCompleteParams) -> SummarizerCompleteResult:
        await asyncio.Event().wait()
        raise AssertionError

    w = ClientSummarizer(SummarizerConfig(provider="client", deadline=0.05), never)
    with pytest.raises(SummaryError, match="no answer") as info:
        await w.summarize(req())
    assert info.value.retryable


async def test_cancellation_propagates() -> None:
    entered = asyncio.Event()

    async def slow(_params: SummarizerCompleteParams) -> SummarizerCompleteResult:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError

    task = asyncio.create_task(ClientSummarizer(SummarizerConfig(), slow).summarize(req()))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_client_provider_needs_a_callable() -> None:
    with pytest.raises(ValueError, match="client"):
        build_summarizer(SummarizerConfig(provider="client"))
