"""What an automatic compaction summarizes does not depend on timing (issue 19, item 11).

A frontend writes each assistant message with ``finish`` (and its usage) first, then that
message's parts, each acknowledged before the next request. At turn 25 the usage overflows.
OpenCode compacts only after the step's parts are written; so must the daemon: every part of
the triggering turn acknowledged before the turn ends (here: the next user message) is in the
summary request, and the same requests give the same summary request and the same windows in
every run. The summarizer is a real HTTP server on 127.0.0.1 that records what it is sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from sidecar_client import Client
from wire import put_message, put_part

from tests.summarizers.httpserver import Reply, ScriptedServer

from .conftest import Spawner

RUNS = 20
TURNS = 40
TRIGGER = 24  # the turn whose usage overflows
MODEL = {"providerID": "test", "modelID": "test-model"}
LIMITS = {"test/test-model": {"context": 100_000, "output": 8_000}}
T0 = 1_700_000_000_000
SUMMARY = "## Goal\nKeep going with the numbered steps."


def usage(n: int) -> dict[str, Any]:
    return {"input": n, "output": 300, "reasoning": 0, "cache": {"read": 0, "write": 0}}


def summary_reply() -> Reply:
    return Reply(
        events=[
            {"choices": [{"index": 0, "delta": {"content": SUMMARY}}]},
            {"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 20}},
            "data: [DONE]\n\n",
        ]
    )


@pytest_asyncio.fixture(loop_scope="session")
async def provider() -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def final_text(turn: int) -> str:
    return f"Final answer of turn {turn}: " + " ".join(f"point {turn}.{j}" for j in range(60))


async def one_run(c: Client) -> list[Any]:
    """The session's window at the end, without ids or times."""
    sid = (await c.create_session()).id
    for i in range(TURNS):
        at = T0 + i * 1_000
        user = await put_message(
            c, {"role": "user", "sessionID": sid, "time": {"created": at}, "model": MODEL}
        )
        await put_part(
            c, {"type": "text", "sessionID": sid, "messageID": user["id"], "text": f"step {i}"}
        )
        # The finishing write first, then the message's parts.
        reply = await put_message(
            c,
            {
                "role": "assistant",
                "sessionID": sid,
                "parentID": user["id"],
                **MODEL,
                "time": {"created": at + 10, "completed": at + 900},
                "finish": "stop",
                "tokens": usage(150_000 if i == TRIGGER else 5_000),
            },
        )
        await put_part(
            c,
            {
                "type": "reasoning",
                "sessionID": sid,
                "messageID": reply["id"],
                "text": f"Thinking about step {i}.",
                "time": {"start": at + 11, "end": at + 12},
            },
        )
        await put_part(
            c,
            {
                "type": "tool",
                "sessionID": sid,
                "messageID": reply["id"],
                "callID": f"call-{i}",
                "tool": "read",
                "state": {
                    "status": "completed",
                    "input": {"filePath": f"src/f{i}.py"},
                    "output": f"contents of f{i} " * 80,
                    "title": f"src/f{i}.py",
                    "metadata": {},
                    "time": {"start": at + 20, "end": at + 30},
                },
            },
        )
        await put_part(
            c, {"type": "text", "sessionID": sid, "messageID": reply["id"], "text": final_text(i)}
        )
    await c.request("session/idle", {"sessionID": sid})
    ctx = await c.context(sid)
    window = [
        (
            m["info"]["role"],
            bool(m["info"].get("summary")),
            [
                (p["type"], p.get("text"), p.get("state", {}).get("output"))
                for p in m["parts"]
                if p["type"] != "compaction"
            ],
        )
        for m in ctx.messages
    ]
    return window


async def test_the_span_a_compaction_summarizes_is_the_same_in_every_run(
    spawner: Spawner, provider: ScriptedServer
) -> None:
    c = await spawner(
        initialization_options={
            "models": LIMITS,
            "summarizer": {"provider": "openai", "model": "fake", "baseURL": f"{provider.url}/v1"},
        }
    )
    windows: list[Any] = []
    inputs: list[Any] = []
    for run in range(RUNS):
        provider.script(summary_reply())
        seen = len(provider.requests)
        window = await one_run(c)
        sent = provider.requests[seen:]
        assert len(sent) == 1, f"run {run}: {len(sent)} summary requests"
        messages = [(m["role"], m.get("content")) for m in sent[0].json()["messages"]]
        text = json.dumps(messages)
        # Every part of the triggering turn, acknowledged before the turn ended, is summarized.
        assert final_text(TRIGGER) in text, f"run {run}: the final text part was not summarized"
        assert f"contents of f{TRIGGER}" in text, f"run {run}"
        windows.append(window)
        inputs.append(messages)
    # The window starts at the compaction and holds every later turn.
    first = windows[0]
    assert first[1][:2] == ("assistant", True)
    assert any(SUMMARY in (text or "") for _, text, _ in first[1][2])
    assert all(final_text(TRIGGER) not in json.dumps(w) for w in windows)
    assert [final_text(i) in json.dumps(first) for i in range(TRIGGER + 1, TURNS)] == [True] * (
        TURNS - TRIGGER - 1
    )
    different = [n for n in range(RUNS) if windows[n] != first or inputs[n] != inputs[0]]
    print(f"\n{RUNS} runs of a {TURNS}-turn session, parts after finish: {len(different)} differ")
    assert different == []
