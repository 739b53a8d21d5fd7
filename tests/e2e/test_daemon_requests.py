"""Requests from the daemon to a client that declared the capability, answered through
``Client.on_request`` (DESIGN §4: ``compaction/compacting`` and ``summarizer/complete``)."""

from __future__ import annotations

from typing import Any

from client_writer import CLIENT_WRITER
from sidecar_client import Client
from wire import put_message, put_part, stored

from .builders import assistant_message, text_part, user_message
from .conftest import Spawner


async def small_conversation(client: Client) -> str:
    session = await client.create_session()
    user = await put_message(client, user_message(session.id))
    await put_part(client, text_part(session.id, user["id"], "please fix foo.py " * 60))
    reply = await put_message(client, assistant_message(session.id, user["id"], finish="stop"))
    await put_part(client, text_part(session.id, reply["id"], "fixed it " * 60))
    return session.id


async def test_compacting_hook_is_asked_during_compaction(spawner: Spawner) -> None:
    client = await spawner(capabilities={"compactingHook": True})
    asked: list[Any] = []

    async def hook(params: Any) -> Any:
        asked.append(params)
        return {"context": ["keep: the user prefers tabs"]}

    client.on_request("compaction/compacting", hook)
    session_id = await small_conversation(client)
    result = await client.compact(session_id)
    assert result.status in ("continue", "stop")
    assert asked == [{"sessionID": session_id}]


async def test_client_summarizer_writes_the_summary(spawner: Spawner) -> None:
    client = await spawner(**CLIENT_WRITER)
    asked: list[Any] = []

    async def summarize(params: Any) -> Any:
        asked.append(params)
        return {"text": "SUMMARY: foo.py was fixed"}

    client.on_request("summarizer/complete", summarize)
    session_id = await small_conversation(client)
    result = await client.compact(session_id)

    assert len(asked) == 1
    assert isinstance(asked[0]["system"], str) and asked[0]["messages"]
    assert asked[0]["maxTokens"] > 0
    assert result.summary_message_id is not None
    page = await stored(client, session_id)
    [summary] = [m for m in page.messages if m.info["id"] == result.summary_message_id]
    assert summary.info["summary"] is True
    # The client's text, then the engine's artifact ledger, which no writer can drop.
    [text] = [p["text"] for p in summary.parts if p.get("type") == "text"]
    prose, block = text.split("\n\n## Artifact ledger\n", 1)
    assert prose == "SUMMARY: foo.py was fixed"
    assert block.startswith("\n```ledger\n### First user request\n- please fix foo.py please")
    assert "## Goal, ## Decisions, ## Current state" in asked[0]["system"]
