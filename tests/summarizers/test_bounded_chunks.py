"""Never too large to compact: a history 5x the writer's input limit is summarized in chunks,
oldest first, each request within the limit and carrying the previous chunk's summary."""

from __future__ import annotations

import httpx

from sidecar.engine.tokens import estimate, estimate_messages
from sidecar.model.config import SummarizerConfig
from sidecar.summarizers.openai import OpenAISummarizer

from .helpers import SleepRecorder, assistant, summarize_bounded, tool, user
from .httpserver import ScriptedServer
from .test_openai_writer import stream

LIMIT = 4_000  # the writer's input window, in estimated tokens


def _history() -> list:  # type: ignore[type-arg]
    msgs = []
    for i in range(20):
        msgs.append(user(f"step {i}: look at module_{i}.py"))
        msgs.append(assistant(tool("read", {"filePath": f"src/module_{i}.py"}, "line\n" * 800)))
    return msgs


async def test_history_five_times_the_window_is_chunked(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    history = _history()
    assert estimate_messages(history) >= 5 * LIMIT
    server.script(*[stream(f"summary part {i}") for i in range(40)])
    cfg = SummarizerConfig(
        provider="openai",
        model="m",
        base_url=server.url + "/v1",
        max_input_tokens=LIMIT,
        timeout=5.0,
        deadline=30.0,
    )
    writer = OpenAISummarizer(cfg, http=http, env={}, sleep=SleepRecorder())
    steps: list[str] = []
    result = await summarize_bounded(
        writer,
        history,
        ["summary of an earlier compaction"],
        max_tokens=500,
        max_input_tokens=LIMIT,
        progress=lambda msg, pct: steps.append(msg),
    )
    sent = server.requests
    assert len(sent) >= 5
    for i, request in enumerate(sent):
        body = request.json()
        size = sum(estimate(str(m.get("content") or "")) for m in body["messages"])
        size += sum(estimate(str(m.get("tool_calls") or "")) for m in body["messages"])
        assert size <= LIMIT, f"request {i} sent {size} tokens"
        assert "tools" not in body
        text = str(body["messages"])
        if i == 0:
            assert "summary of an earlier compaction" in text
            assert "module_0.py" in text
        else:
            assert f"summary part {i - 1}" in text  # the previous chunk's summary is carried
    # oldest first: the first request holds the first module, the last one the last module
    assert "module_19.py" in str(sent[-1].json()["messages"])
    # The model's text, then the artifact ledger of the whole history, whatever the model wrote.
    prose, block = result.text.split("\n\n## Artifact ledger\n", 1)
    assert prose == f"summary part {len(sent) - 1}"
    assert all(f"- src/module_{i}.py\n" in block for i in range(20))
    assert "- step 0: look at module_0.py\n" in block  # first request
    assert "- step 19: look at module_19.py\n" in block  # latest request
    first = sent[0].json()["messages"][0]
    assert first["role"] == "system" and "## Goal, ## Decisions" in first["content"]
    assert result.tokens.output > 0
    assert steps[0].startswith("summarizing chunk 1 of")


async def test_a_single_huge_output_is_truncated_with_a_marker(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    huge = [user("read the log"), assistant(tool("bash", {"command": "cat log"}, "E" * 200_000))]
    server.script(stream("done"))
    cfg = SummarizerConfig(
        provider="openai", model="m", base_url=server.url + "/v1", timeout=5.0, deadline=30.0
    )
    writer = OpenAISummarizer(cfg, http=http, env={}, sleep=SleepRecorder())
    await summarize_bounded(
        writer,
        huge,
        [],
        max_tokens=500,
        max_input_tokens=LIMIT,
    )
    body = server.requests[0].json()
    text = str(body["messages"])
    assert "[Tool output truncated for compaction: omitted" in text
    assert sum(estimate(str(m.get("content") or "")) for m in body["messages"]) <= LIMIT


async def test_streaming_progress_is_reported_while_a_summary_is_written(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.script(stream(*["word " * 20] * 30))  # 3,000 characters in 30 pieces
    cfg = SummarizerConfig(
        provider="openai", model="m", base_url=server.url + "/v1", timeout=5.0, deadline=30.0
    )
    writer = OpenAISummarizer(cfg, http=http, env={}, sleep=SleepRecorder())
    steps: list[str] = []
    await summarize_bounded(
        writer,
        _history()[:2],
        [],
        max_tokens=2000,
        max_input_tokens=None,
        progress=lambda msg, pct: steps.append(msg),
    )
    written = [s for s in steps if "characters written" in s]
    assert len(written) == 3  # throttled: one report per 1,000 characters
    assert written[-1] == "chunk 1 of 1: 3000 characters written"


async def test_a_model_cannot_drop_or_forge_the_ledger(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    # The model echoes a ledger block of its own and leaves out the earlier file: the summary
    # still carries the daemon's ledger, rolled from the previous summary's block.
    forged = (
        "Goal: go on.\n\n## Artifact ledger\n\n```ledger\n### Files modified\n- made/up.py\n```"
    )
    server.script(stream(forged))
    cfg = SummarizerConfig(
        provider="openai", model="m", base_url=server.url + "/v1", timeout=5.0, deadline=30.0
    )
    writer = OpenAISummarizer(cfg, http=http, env={}, sleep=SleepRecorder())
    previous = (
        "Earlier prose.\n\n## Artifact ledger\n\n```ledger\n### Files modified\n- src/old.py\n"
        "### First user request\n- start\n```\n"
    )
    history = [
        user("and now the new one"),
        assistant(tool("bash", {"command": "cd src && echo x > new.py"}, "")),
    ]
    result = await summarize_bounded(
        writer,
        history,
        [previous],
        max_tokens=1_000,
        max_input_tokens=None,
    )
    sent = str(server.requests[0].json()["messages"])
    assert "Earlier prose." in sent and "src/old.py" not in sent  # the model sees no block
    assert result.text == (
        "Goal: go on.\n\n## Artifact ledger\n\n```ledger\n### Files modified\n- src/old.py\n"
        "- src/new.py\n### First user request\n- start\n### Latest user request\n"
        "- and now the new one\n```\n"
    )
