"""``session/context`` with ``since``: a delta after appends, the full window after a
compaction, a prune or an edit before the end, in every format, over a real daemon."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from sidecar_client import Client, ContextWindow
from wire import put_message, put_part

from .builders import assistant_message, text_part, user_message

FORMATS = ("parts", "openai", "anthropic")


def tool_part(session_id: str, message_id: str, n: int, size: int) -> dict[str, Any]:
    return {
        "sessionID": session_id,
        "messageID": message_id,
        "type": "tool",
        "callID": f"call_{message_id}_{n}",
        "tool": "bash",
        "state": {
            "status": "completed",
            "input": {"cmd": "ls"},
            "output": "x" * size,
            "title": "",
            "metadata": {},
            "time": {"start": 1, "end": 2},
        },
    }


async def turn(client: Client, sid: str, text: str, output: int = 0) -> tuple[str, str]:
    """A user prompt and a reply (a tool call with ``output`` characters, then text)."""
    user = await put_message(client, user_message(sid))
    await put_part(client, text_part(sid, user["id"], text))
    reply = await put_message(client, assistant_message(sid, user["id"]))
    if output:
        await put_part(client, tool_part(sid, reply["id"], 0, output))
    await put_part(client, text_part(sid, reply["id"], f"done: {text}"))
    return user["id"], reply["id"]


async def session_of(client: Client, *, turns: int, output: int) -> str:
    """A new session of ``turns`` turns ("step 0", "step 1", ...); returns its id."""
    sid = (await client.create_session()).id
    for i in range(turns):
        await turn(client, sid, f"step {i}", output=output)
    return sid


def encoded(messages: list[Any]) -> bytes:
    return msgspec.json.encode(messages)


async def full(client: Client, sid: str, fmt: str) -> list[Any]:
    result = await client.context(sid, fmt)
    assert result.delta is None and result.start is None and result.revision  # no `since`
    return list(result.messages)


async def refreshed(client: Client, window: ContextWindow) -> object:
    """Refreshes ``window``, checks it equals a full read, and says whether it came as a delta."""
    result = await window.refresh()
    assert encoded(window.messages) == encoded(await full(client, window.session_id, window.format))
    return result.delta


@pytest.mark.parametrize("fmt", FORMATS)
async def test_appends_come_as_a_delta_that_assembles_the_window(shared: Client, fmt: str) -> None:
    sid = await session_of(shared, turns=4, output=200)
    window = shared.window(sid, fmt)
    first = await window.refresh()
    assert first.delta is None  # the first read has no `since`
    for i in range(4, 8):
        await turn(shared, sid, f"step {i}", output=200)
        before = window.revision
        raw = await shared.context(sid, fmt, since=before)
        assert raw.delta is True and isinstance(raw.start, int) and raw.start > 0
        assert len(encoded(raw.messages)) < len(encoded(await full(shared, sid, fmt)))
        assert await refreshed(shared, window) is True
    # A part added to the newest message: changed at the end, still a delta.
    _, last_reply = await turn(shared, sid, "last")
    await window.refresh()
    await put_part(shared, text_part(sid, last_reply, "one more"))
    assert await refreshed(shared, window) is True


@pytest.mark.parametrize("fmt", FORMATS)
async def test_an_edit_before_the_end_gets_the_full_window(shared: Client, fmt: str) -> None:
    sid = (await shared.create_session()).id
    first_user, _ = await turn(shared, sid, "first")
    for i in range(3):
        await turn(shared, sid, f"step {i}")
    window = shared.window(sid, fmt)
    await window.refresh()
    await put_part(shared, text_part(sid, first_user, "an edit of the first prompt"))
    assert await refreshed(shared, window) is False
    # Removal before the end: full too.
    await shared.remove_message(sid, first_user)
    assert await refreshed(shared, window) is False


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_prune_gets_the_full_window(shared: Client, fmt: str) -> None:
    sid = (await shared.create_session()).id
    for i in range(3):
        await turn(shared, sid, f"big {i}", output=100_000)  # 25,000 tokens each
    for i in range(2):
        await turn(shared, sid, f"small {i}")
    window = shared.window(sid, fmt)
    await window.refresh(fit=False)
    pruned = await shared.prune(sid)
    assert pruned.part_ids
    result = await window.refresh(fit=False)
    assert result.delta is False
    assert encoded(window.messages) == encoded(
        list((await shared.context(sid, fmt, fit=False)).messages)
    )


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_compaction_gets_the_full_window(shared: Client, fmt: str) -> None:
    sid = await session_of(shared, turns=3, output=100)
    window = shared.window(sid, fmt)
    await window.refresh()
    await shared.compact(sid)
    assert await refreshed(shared, window) is False


async def test_an_unknown_revision_or_another_format_gets_the_full_window(shared: Client) -> None:
    sid = (await shared.create_session()).id
    await turn(shared, sid, "hello")
    parts = await shared.context(sid, "parts")
    for since, fmt in (("nope", "parts"), (parts.revision, "openai")):
        result = await shared.context(sid, fmt, since=since)
        assert result.delta is False
        assert encoded(list(result.messages)) == encoded(await full(shared, sid, fmt))
    other = (await shared.create_session()).id
    await turn(shared, other, "hello")
    result = await shared.context(other, "parts", since=parts.revision)
    assert result.delta is False
