"""A session's row and its compaction boundary, read several times a turn, are remembered
(``WindowCache.recall``) and never served stale: every write that can change them, this
daemon's or another's on the same database, is seen by the next read. On PostgreSQL, where
hearing of other daemons' writes is a round trip of its own, each read asks the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from sidecar.model.messages import AssistantMessage, MessageTime, UserMessage
from sidecar.model.parts import CompactionPart, TextPart
from sidecar.model.session import Session, SessionTime
from sidecar.store import Key, Store

enc = msgspec.json.encode


class _Counted:
    """Counts the store's point queries (the reads the memos save); ``same(k)``: ``k`` queries
    so far where reads are remembered (else any number)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        self.memo = store.backend.cheap_fresh
        real = store.backend.query_point

        async def query_point(sql: str, args: Any = ()) -> Any:
            self.n += 1
            return await real(sql, args)

        monkeypatch.setattr(store.backend, "query_point", query_point)

    def same(self, n: int) -> bool:
        return self.n == n or not self.memo


async def _compacted(store: Store, marker: str, created: int, summary: str) -> None:
    """A marker message with its compaction part, and its finished summary."""
    m = UserMessage(id=marker, session_id="s", time=MessageTime(created=created))
    part = CompactionPart(id=f"{marker}-c", session_id="s", message_id=marker, auto=True)
    done = AssistantMessage(
        id=summary,
        session_id="s",
        parent_id=marker,
        summary=True,
        finish="stop",
        time=MessageTime(created=created + 1),
    )
    await store.put_message(m, enc(m))
    await store.put_part(part, enc(part))
    await store.put_message(done, enc(done))


async def test_the_boundary_is_read_once_until_a_write_that_can_move_it(
    db: str | Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.put_session(Session(id="s", title="", time=SessionTime(created=1, updated=1)))
    await _compacted(store, "m1", 10, "m2")
    queries = _Counted(store, monkeypatch)
    first = await store.boundary("s")
    assert first is not None and first.marker == Key(10, "m1")
    assert await store.boundary("s") == first and queries.same(1)
    # a part streamed into the conversation cannot move it: no query
    text = TextPart(id="t1", session_id="s", message_id="m2", text="go on")
    await store.put_part(text, enc(text))
    assert await store.boundary("s") == first and queries.same(1)
    # nor can an assistant's message
    reply = AssistantMessage(id="m2b", session_id="s", parent_id="m1", time=MessageTime(created=12))
    await store.put_message(reply, enc(reply))
    assert await store.boundary("s") == first and queries.same(1)
    # its summary rewritten as no summary, or as another marker's: there is none any more
    done = await store.get_message("m2")
    assert done is not None and isinstance(done[0], AssistantMessage)
    for undone in (
        msgspec.structs.replace(done[0], summary=False),
        msgspec.structs.replace(done[0], parent_id="m0"),
    ):
        await store.put_message(undone, enc(undone))
        assert await store.boundary("s") is None
        await store.put_message(done[0], enc(done[0]))
        assert await store.boundary("s") == first
    # its marker rewritten as an assistant's message: none
    marker = await store.get_message("m1")
    assert marker is not None
    as_reply = AssistantMessage(id="m1", session_id="s", parent_id="", time=MessageTime(created=10))
    await store.put_message(as_reply, enc(as_reply))
    assert await store.boundary("s") is None
    await store.put_message(marker[0], enc(marker[0]))
    assert await store.boundary("s") == first
    # the boundary's compaction part rewritten as another kind: there is none any more
    retyped = TextPart(id="m1-c", session_id="s", message_id="m1", text="not a marker")
    await store.put_part(retyped, enc(retyped))
    assert await store.boundary("s") is None
    # a new compaction (messages and a compaction part) moves it
    await _compacted(store, "m3", 30, "m4")
    assert (b := await store.boundary("s")) is not None and b.marker == Key(30, "m3")
    # with a bound (a revert), remembered apart
    assert await store.boundary("s", before=Key(30, "m3")) is None
    # its summary removed: gone
    await store.remove_message("s", "m4")
    assert await store.boundary("s") is None
    # another daemon on the same database compacts: seen at the next read
    other = await Store.open(db)
    try:
        await _compacted(other, "m5", 50, "m6")
    finally:
        await other.close()
    assert (b := await store.boundary("s")) is not None and b.marker == Key(50, "m5")


async def test_a_sessions_row_is_read_once_until_it_is_written(
    db: str | Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Session(id="s", title="first", time=SessionTime(created=1, updated=1))
    await store.put_session(session)
    queries = _Counted(store, monkeypatch)
    got = await store.get_session("s")
    assert got is not None and got.title == "first"
    assert queries.memo == isinstance(db, Path)  # SQLite remembers, PostgreSQL asks
    again = await store.get_session("s")
    assert again == got and (again is got or not queries.memo) and queries.same(1)
    # a message raises its ``updated``
    m = UserMessage(id="m1", session_id="s", time=MessageTime(created=500))
    await store.put_message(m, enc(m))
    assert (got := await store.get_session("s")) is not None and got.time.updated == 500
    # a part does not touch the row: no query
    n = queries.n
    p = TextPart(id="p1", session_id="s", message_id="m1", text="x")
    await store.put_part(p, enc(p))
    assert await store.get_session("s") == got and queries.same(n)
    await store.put_session(msgspec.structs.replace(session, title="second"))
    assert (got := await store.get_session("s")) is not None and got.title == "second"
    other = await Store.open(db)
    try:
        await other.put_session(msgspec.structs.replace(session, title="third"))
    finally:
        await other.close()
    assert (got := await store.get_session("s")) is not None and got.title == "third"
    await store.delete_session("s")
    assert await store.get_session("s") is None
