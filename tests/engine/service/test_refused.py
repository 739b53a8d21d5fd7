"""Issue 32 item 3: a refused or lost compaction leaves nothing.

A compaction whose summary would not make the context smaller is refused ("history kept"),
and one whose session another daemon compacted meanwhile is lost. Either way nothing of it
stays stored (not its marker, not its summary): the session has the messages it had, no
entry in ``session/compactions``, and ``session/compacted`` says why it was ``rejected``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sidecar.engine.compactor import Request
from sidecar.errors import InvalidParams
from sidecar.store import Store

from .harness import Harness
from .test_auto import _Writer


async def test_three_refusals_store_nothing_and_say_so(store: Store) -> None:
    h = Harness(store)
    s, _ = await h.first_turn(text="short")
    before = await store.count_messages(s.id)
    h.engine.use_writer(h.cfg.summarizer, _Writer(text="y" * 40_000))  # type: ignore[arg-type]
    for _ in range(3):
        result = await h.engine.compact(Request(session_id=s.id))
        assert result.status == "stop"
        assert "would not make the context smaller" in (result.error or "")
        assert result.summary_message_id is None
    assert await store.count_messages(s.id) == before
    assert await store.boundary(s.id) is None
    assert await h.engine.compactions(s.id) == []
    with pytest.raises(InvalidParams):
        await h.engine.uncompact(s.id, None, False)
    events = h.host.methods("session/compacted")
    assert len(events) == 3
    for event in events:
        assert "would not make the context smaller" in (event.rejected or "")
        assert event.messages_summarized == 0
        assert event.tokens_after == event.tokens_before
        assert event.writer == "test/test-1"
    # What it had stored while it ran went, and the subscribers were told.
    removed = {e.message_id for e in h.host.methods("message/removed")}
    assert len(removed) == 6  # three markers, three summaries


async def test_a_compaction_lost_to_another_daemon_stores_nothing(
    store: Store, db: str | Path
) -> None:
    """The other daemon (a second store on the database) commits a compaction of the session
    while this one's writer works (as when a lease was lost): this one is dropped whole."""
    h = Harness(store)
    s, _ = await h.first_turn(text="x" * 8_000)
    other = await Store.open(db)
    try:
        h2 = Harness(other)
        slow = _Writer()
        slow.gate = asyncio.Event()
        task = asyncio.create_task(
            h.engine.compactor.run(Request(session_id=s.id), h.cfg, slow)  # type: ignore[arg-type]
        )
        await slow.started.wait()
        theirs = await h2.engine.compactor.run(Request(session_id=s.id), h2.cfg, _Writer())  # type: ignore[arg-type]
        assert theirs.result.status == "continue"
        slow.gate.set()
        mine = (await task).result
        assert mine.status == "stop" and "another" in (mine.error or "")
        assert mine.summary_message_id is None
        # The first turn (2) and the other daemon's marker and summary (2): nothing of ours.
        assert await store.count_messages(s.id) == 4
        boundary = await store.boundary(s.id)
        assert boundary is not None and boundary.marker == theirs.marker
        assert [r.message_id for r in await h.engine.compactions(s.id)] == [
            theirs.result.summary_message_id
        ]
        [event] = h.host.methods("session/compacted")
        assert "another" in (event.rejected or "")
    finally:
        await other.close()


async def test_an_automatic_compaction_that_cannot_help_stores_nothing(store: Store) -> None:
    """The overflow is the system prompt's, not the history's: refused, and the session keeps
    exactly its messages, turn after turn."""
    h = Harness(store)
    s = await h.session()
    for _ in range(3):
        u = await h.user(s.id, "go")
        a = await h.assistant(s.id, u.id, text="ok", input_tokens=180_000)
        h.engine.message_stored(a)
        await h.settle()
    assert await store.count_messages(s.id) == 6
    assert await h.engine.compactions(s.id) == []
    events = h.host.methods("session/compacted")
    assert events and all("cannot help" in (e.rejected or "") for e in events)
    assert all(e.auto and e.messages_summarized == 0 for e in events)
