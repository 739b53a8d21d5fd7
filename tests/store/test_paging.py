"""Reads whose memory follows the reply (issue 9 item 11) and a cache that sees other
processes' writes (item 10), against real SQLite files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.errors import TooLarge
from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.parts import TextPart
from sidecar.model.session import Session, SessionTime
from sidecar.store import Store

enc = msgspec.json.encode
SID = "ses_p"


async def _session(store: Store, shape: list[int], text: str = "x") -> None:
    """Messages ``msg_000``… with ``shape[i]`` parts each."""
    await store.put_session(Session(id=SID, title="", time=SessionTime(created=1, updated=1)))
    messages, parts = [], []
    for i, count in enumerate(shape):
        m = UserMessage(id=f"msg_{i:03d}", session_id=SID, time=MessageTime(created=1 + i))
        messages.append((m, enc(m)))
        for j in range(count):
            p = TextPart(id=f"prt_{i:03d}_{j:05d}", session_id=SID, message_id=m.id, text=text)
            parts.append((p, enc(p)))
    await store.put_many(messages, parts)


async def _all_pages(
    store: Store, limit: int | None, part_limit: int | None
) -> list[tuple[str, list[bytes]]]:
    """Every page, messages continued across pages merged back into one."""
    out: list[tuple[str, list[bytes]]] = []
    cursor: str | None = None
    while True:
        page, cursor = await store.page_messages(SID, limit, cursor, part_limit)
        assert page, "a page with a cursor before it is never empty"
        for stored in page:
            mid = msgspec.json.decode(stored.info)["id"]
            parts = [bytes(p) for p in stored.parts]
            if out and out[-1][0] == mid:
                out[-1][1].extend(parts)
            else:
                out.append((mid, parts))
        if cursor is None:
            return out


async def _expected(store: Store) -> list[tuple[str, list[bytes]]]:
    page, _ = await store.page_raw(SID, None, None)
    return [(msgspec.json.decode(m.info)["id"], [bytes(p) for p in m.parts]) for m in page]


async def test_one_message_with_many_parts_is_paged_inside_the_message(store: Store) -> None:
    await _session(store, [2, 2500, 1])
    first, cursor = await store.page_messages(SID, None, None, 1000)
    assert [len(m.parts) for m in first] == [2, 998] and cursor is not None
    second, cursor = await store.page_messages(SID, None, cursor, 1000)
    assert [len(m.parts) for m in second] == [1000]  # the same message, its info repeated
    assert second[0].info == first[1].info
    assert await _all_pages(store, None, 1000) == await _expected(store)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shape=st.lists(st.integers(0, 7), min_size=1, max_size=8),
    limit=st.none() | st.integers(1, 4),
    part_limit=st.none() | st.integers(1, 5),
    budget=st.integers(600, 3000),
)
async def test_pages_put_together_are_the_whole_history(
    tmp_path_factory: pytest.TempPathFactory,
    shape: list[int],
    limit: int | None,
    part_limit: int | None,
    budget: int,
) -> None:
    store = await Store.open(tmp_path_factory.mktemp("p") / "s.db")
    try:
        await _session(store, shape)
        store.max_read_bytes = budget  # each part is ~90 bytes: pages also end by size
        if limit is None and part_limit is None:  # the whole history asked: all, or an error
            try:
                _, cursor = await store.page_messages(SID, None, None)
            except TooLarge as exc:
                assert "`partLimit`" in str(exc) and "`cursor`" in str(exc)
                part_limit = 3
            else:
                assert cursor is None
        assert await _all_pages(store, limit, part_limit) == await _expected(store)
    finally:
        await store.close()


async def test_a_part_larger_than_a_reply_may_hold_is_refused_with_how_to_page(
    store: Store,
) -> None:
    await _session(store, [1], text="y" * 5000)
    store.max_read_bytes = 2000
    with pytest.raises(TooLarge, match="maxReplyBytes"):
        await store.page_messages(SID, None, None, 10)


async def test_a_page_reads_the_json_of_the_messages_on_it_only(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory follows the page: of the messages listed for it (up to ``limit``), only those
    the page ends up holding have their JSON read."""
    await _session(store, [3] * 50)
    read: list[str] = []
    query = store._db.query

    async def seen(sql: str, args: Any = ()) -> list[Any]:
        rows = await query(sql, args)
        read.extend(r[-1] for r in rows if isinstance(r[-1], str) and r[-1].startswith("{"))
        return rows

    monkeypatch.setattr(store._db, "query", seen)
    page, cursor = await store.page_messages(SID, 50, None, 6)
    on_page = [msgspec.json.decode(m.info)["id"] for m in page]
    # Six parts: two whole messages, and the third listed with none of its parts.
    assert on_page == ["msg_000", "msg_001", "msg_002"] and cursor is not None
    assert sorted(msgspec.json.decode(r)["id"] for r in read) == on_page


async def test_a_history_of_too_many_messages_is_refused_before_anything_is_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _session(store, [1] * 30)
    monkeypatch.setattr("sidecar.store.pages.MAX_PAGE_MESSAGES", 20)
    streamed: list[str] = []
    stream = store._db.stream

    def seen(sql: str, args: Any) -> Any:
        streamed.append(sql)
        return stream(sql, args)

    monkeypatch.setattr(store._db, "stream", seen)
    with pytest.raises(TooLarge, match="does not fit one reply"):
        await store.page_messages(SID, None, None)
    assert streamed == []


async def test_a_window_over_the_read_budget_is_refused_not_loaded(store: Store) -> None:
    await _session(store, [50, 50], text="z" * 100)
    store.max_read_bytes = 4000
    with pytest.raises(TooLarge, match="session/messages"):
        await store.window(SID)


async def test_a_second_process_writes_reach_a_warm_window_cache(db: str | Path) -> None:
    ours, theirs = await Store.open(db), await Store.open(db)
    try:
        await _session(ours, [1])
        assert len(await ours.window(SID)) == 1
        assert len(await ours.window(SID)) == 1 and ours.cache.hits == 1  # warm
        m = UserMessage(id="msg_theirs", session_id=SID, time=MessageTime(created=99))
        await theirs.put_message(m, enc(m))
        assert [w.info.id for w in await ours.window(SID)][-1] == "msg_theirs"
        # our own writes keep the cache: they go through the connection asked
        mine = UserMessage(id="msg_mine", session_id=SID, time=MessageTime(created=100))
        await ours.put_message(mine, enc(mine))
        hits = ours.cache.hits
        assert [w.info.id for w in await ours.window(SID)][-1] == "msg_mine"
        assert ours.cache.hits == hits + 1
    finally:
        await ours.close()
        await theirs.close()


async def test_a_lease_is_held_by_one_process_until_released_or_expired(db: str | Path) -> None:
    a, b = await Store.open(db), await Store.open(db)
    try:
        assert await a.acquire_lease("compact:s", "daemon-a", 60_000)
        assert not await b.acquire_lease("compact:s", "daemon-b", 60_000)
        assert await a.acquire_lease("compact:s", "daemon-a", 60_000)  # renewal by its owner
        await a.release_lease("compact:s", "daemon-a")
        assert await b.acquire_lease("compact:s", "daemon-b", -1)  # already expired
        assert await a.acquire_lease("compact:s", "daemon-a", 60_000)  # taken over
    finally:
        await a.close()
        await b.close()
