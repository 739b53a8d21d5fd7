"""A window too large to keep is rendered as it is read (``engine/streamed.py``): the reply
is the whole-window path's byte for byte, in every format and stub mode, on SQLite and
PostgreSQL; a window whose rules look ahead is left to the whole-window path; nothing of a
streamed window stays cached or held for ``since``."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from sidecar.engine.service import Engine
from sidecar.errors import TooLarge
from sidecar.model.buffers import Elements
from sidecar.model.config import build
from sidecar.model.messages import WithParts
from sidecar.model.rpc import ContextFormat, ContextResult
from sidecar.model.session import RevertInfo, Session, SessionTime
from sidecar.protocol.shared import PieceEncoder
from sidecar.store import Store

from .builders import SID, compaction, file, finish, reasoning, step, subtask, tool
from .builders import Session as Conversation
from .service.harness import RecordingHost

FORMATS: list[ContextFormat] = ["parts", "openai", "anthropic"]
enc = msgspec.json.encode


def conversation(*, duplicate: bool = False) -> Conversation:
    """Every kind of message and part the renderers treat apart, a finished compaction
    among them (the window starts at its marker)."""
    c = Conversation()
    c.user("early question")
    c.assistant("early answer", tool("bash", "early output"))
    c.compact()
    c.user(
        "look at these",
        file("image/png", "https://example.com/a.png"),
        file("text/plain", "data:text/plain;base64,aGVsbG8=", filename="a.txt"),
        subtask(),
    )
    c.assistant(
        reasoning("thinking"),
        step(),
        "first step",
        tool("bash", "out 1\n" * 50, input={"command": "ls -la"}),
        step(),
        tool("read", "pruned output\n" * 40, compacted=5),
        tool("edit", status="error", error="no such file"),
        finish(),
    )
    c.assistant("cut short", tool("bash", status="running"), error="MessageAbortedError")
    c.assistant(reasoning("nothing sent"), error="APIError")
    c.assistant("half a summary", summary=True, finish=None)
    c.user("and the media?")
    c.assistant(
        tool("read", "an image", attachments=[file("image/png", "https://example.com/b.png")]),
        tool("grep", "x" * 3000, call="dup" if duplicate else None),
    )
    c.user("   ")
    c.assistant("   ", tool("bash", "again", call="dup" if duplicate else None))
    c.user("last")
    c.assistant("done")
    return c


async def stored(store: Store, msgs: list[WithParts]) -> None:
    await store.put_session(Session(id=SID, title="t", time=SessionTime(created=1, updated=1)))
    for m in msgs:
        await store.put_message(m.info, enc(m.info))
        for p in m.parts:
            await store.put_part(p, enc(p))


def wire(result: ContextResult) -> bytes:
    """The reply's ``result`` as the daemon sends it (its revision aside)."""
    result.revision = ""
    return b"".join(bytes(b) for b in PieceEncoder().encode(result))


async def both(
    store: Store, fmt: ContextFormat, overrides: dict[str, Any] | None = None
) -> tuple[ContextResult, ContextResult]:
    """(the whole-window path's result, the streaming path's), each read cold."""
    cfg = build([overrides or {}])
    engine = Engine(store, RecordingHost(), lambda: cfg)
    store.cache.clear()
    whole = await engine.context(SID, fmt, cfg)
    store.cache.clear()
    saved, store.stream_over = store.stream_over, 0  # every cold window is streamed
    try:
        streamed = await engine.context(SID, fmt, cfg, stream=True)
    finally:
        store.stream_over = saved
    return whole, streamed


def is_streamed(result: ContextResult) -> bool:
    return bool(result.messages) and all(isinstance(m, Elements) for m in result.messages)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("stub", ["opencode", "informative"])
async def test_a_streamed_window_is_the_whole_paths_reply_byte_for_byte(
    store: Store, fmt: ContextFormat, stub: str
) -> None:
    await stored(store, conversation().messages)
    whole, streamed = await both(store, fmt, {"compaction": {"prunedStub": stub}})
    assert is_streamed(streamed) and not is_streamed(whole)
    assert whole.boundary_message_id is not None  # the window starts at the marker
    assert wire(streamed) == wire(whole)


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_call_id_met_twice_keeps_its_last_part_when_streamed(
    store: Store, fmt: ContextFormat
) -> None:
    """OpenCode #40235: the last part with a call id wins; streaming finds the keepers in a
    pass of their own, then renders."""
    await stored(store, conversation(duplicate=True).messages)
    whole, streamed = await both(store, fmt)
    assert is_streamed(streamed)
    assert wire(streamed) == wire(whole)
    if fmt == "openai":
        calls = [m for m in whole.messages if m.get("role") == "tool"]
        assert [m["content"] for m in calls if m["tool_call_id"] == "dup"] == ["again"]


def with_pending_compaction(c: Conversation) -> Conversation:
    c.user(compaction())  # its summary never came: ``filter_compacted`` must look ahead
    c.user("after it")
    c.assistant("fine")
    return c


def with_collapse_tail(c: Conversation) -> Conversation:
    tail = c.messages[-2].info.id
    c.compact(tail=tail)
    c.user("after the collapse")
    c.assistant("ok")
    return c


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [with_pending_compaction, with_collapse_tail])
async def test_a_window_whose_rules_look_ahead_is_served_whole(
    store: Store, fmt: ContextFormat, shape: Any
) -> None:
    await stored(store, shape(conversation()).messages)
    whole, streamed = await both(store, fmt)
    assert not is_streamed(streamed)
    assert wire(streamed) == wire(whole)


async def test_a_reverted_session_is_served_whole(store: Store) -> None:
    c = conversation()
    await stored(store, c.messages)
    session = await store.require_session(SID)
    cut = c.messages[-4].info.id
    await store.put_session(msgspec.structs.replace(session, revert=RevertInfo(message_id=cut)))
    whole, streamed = await both(store, "openai")
    assert not is_streamed(streamed)
    assert wire(streamed) == wire(whole)
    assert "last" not in wire(whole).decode()


async def test_a_streamed_window_is_neither_cached_nor_held_for_since(store: Store) -> None:
    await stored(store, conversation().messages)
    cfg = build([{}])
    engine = Engine(store, RecordingHost(), lambda: cfg)
    small = await engine.context(SID, "openai", cfg, stream=True)
    assert not is_streamed(small)  # under ``stream_over``: read whole, and cached
    start = (await store.boundary(SID)).marker  # type: ignore[union-attr]
    assert store.cache.holds(SID, start)
    store.cache.clear()
    store.stream_over = 0
    first = await engine.context(SID, "openai", cfg, stream=True)
    assert is_streamed(first) and not store.cache.holds(SID, start)
    # ``since`` from a streamed revision, and with a streamed reply: the whole window.
    again = await engine.context(SID, "openai", cfg, stream=True, since=first.revision)
    assert is_streamed(again) and again.delta is False
    store.stream_over = 1 << 62
    store.cache.clear()
    after = await engine.context(SID, "openai", cfg, stream=True, since=again.revision)
    assert not is_streamed(after) and after.delta is False
    assert wire(after).replace(b'"delta":false,', b"") == wire(again).replace(
        b'"delta":false,', b""
    )


async def test_a_streamed_window_over_the_read_limit_is_refused_and_the_store_serves_on(
    store: Store,
) -> None:
    await stored(store, conversation().messages)
    cfg = build([{}])
    engine = Engine(store, RecordingHost(), lambda: cfg)
    store.stream_over = 0
    store.max_read_bytes = 3000  # passed while streaming
    with pytest.raises(TooLarge):
        await engine.context(SID, "parts", cfg, stream=True)
    store.max_read_bytes = 1 << 30
    for _ in range(8):  # more reads than the spare readers: none was left open
        served = await engine.context(SID, "parts", cfg, stream=True)
        assert is_streamed(served)
