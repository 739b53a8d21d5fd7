"""The window cache never serves anything but what SQLite holds."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sidecar.errors import Conflict
from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.parts import TextPart, ToolCompleted, ToolPart, ToolTime
from sidecar.model.session import Session, SessionTime
from sidecar.store import Decoded, Key, Store, WindowCache

enc = msgspec.json.encode
FAR = Key(2**62, "~")  # an explicit end bypasses the cache: a fresh SQLite read


def _ids(window: list) -> list:  # type: ignore[type-arg]
    return [(m.info.id, m.info.time.created, [enc(p) for p in m.parts]) for m in window]


async def _check(store: Store, sid: str, start: Key | None = None) -> None:
    cached = await store.window(sid, start)
    fresh = await store.window(sid, start, FAR)
    assert _ids(cached) == _ids(fresh)


async def test_second_read_is_a_hit_and_writes_keep_it_exact(store: Store) -> None:
    await store.put_session(Session(id="s", title="", time=SessionTime(created=1, updated=1)))
    other = Session(id="o", title="", time=SessionTime(created=1, updated=1))
    await store.put_session(other)
    m = UserMessage(id="m1", session_id="s", time=MessageTime(created=10))
    await store.put_message(m, enc(m))
    await store.window("s")
    hits = store.cache.hits
    await _check(store, "s")
    assert store.cache.hits == hits + 1
    t = TextPart(id="p2", session_id="s", message_id="m1", text="b")
    await store.put_part(t, enc(t))
    t1 = TextPart(id="p1", session_id="s", message_id="m1", text="a")  # sorts before p2
    await store.put_part(t1, enc(t1))
    await _check(store, "s")
    tool = ToolPart(
        id="p3",
        session_id="s",
        message_id="m1",
        call_id="c",
        tool="bash",
        state=ToolCompleted(input={}, output="out", time=ToolTime(start=1, end=2)),
    )
    await store.put_part(tool, enc(tool))
    await store.mark_compacted(["p3"], 99)
    await _check(store, "s")
    # the same message id written for another session is a conflict and changes nothing
    stolen = UserMessage(id="m1", session_id="o", time=MessageTime(created=5))
    with pytest.raises(Conflict):
        await store.put_message(stolen, enc(stolen))
    await _check(store, "s")
    # a message whose time changes moves
    moved = UserMessage(id="m1", session_id="s", time=MessageTime(created=30))
    m2 = UserMessage(id="m2", session_id="s", time=MessageTime(created=20))
    await store.put_message(m2, enc(m2))
    await store.put_message(moved, enc(moved))
    await _check(store, "s")
    assert [m.info.id for m in await store.window("s")] == ["m2", "m1"]
    await store.remove_part("s", "m1", "p1")
    await store.remove_message("s", "m2")
    await _check(store, "s")


async def test_a_window_from_a_boundary_stays_cached_as_messages_are_added(store: Store) -> None:
    """After a compaction the window starts at its marker: a new message must not send the
    next read back to SQLite, and one moved in from before the window (with a part the
    cache never saw) must still be read exactly."""
    await store.put_session(Session(id="s", title="", time=SessionTime(created=1, updated=1)))
    start = Key(10, "")
    old = UserMessage(id="m0", session_id="s", time=MessageTime(created=5))
    await store.put_message(old, enc(old))
    hidden = TextPart(id="p0", session_id="s", message_id="m0", text="before the window")
    await store.put_part(hidden, enc(hidden))
    first = UserMessage(id="m1", session_id="s", time=MessageTime(created=10))
    await store.put_message(first, enc(first))
    await store.window("s", start)  # read from SQLite: the cache holds it from here
    new = UserMessage(id="m2", session_id="s", time=MessageTime(created=20))
    await store.put_message(new, enc(new))
    part = TextPart(id="p2", session_id="s", message_id="m2", text="new")
    await store.put_part(part, enc(part))
    hits = store.cache.hits
    await _check(store, "s", start)
    assert store.cache.hits == hits + 1
    moved = UserMessage(id="m0", session_id="s", time=MessageTime(created=30))
    await store.put_message(moved, enc(moved))
    await _check(store, "s", start)
    assert [p.id for m in await store.window("s", start) for p in m.parts] == ["p2", "p0"]


async def test_a_compactions_appends_keep_the_window_cached_and_its_new_start_is_served_from_it(
    store: Store,
) -> None:
    """A compaction appends its marker and summary in one batch (``put_many``) and the window
    then starts later, at the marker: both come from the cached window, not from SQLite, and
    the entry lets go of what is now before its start."""
    await store.put_session(Session(id="s", title="", time=SessionTime(created=1, updated=1)))
    for i in (1, 2):
        m = UserMessage(id=f"m{i}", session_id="s", time=MessageTime(created=10 * i))
        t = TextPart(id=f"p{i}", session_id="s", message_id=f"m{i}", text=f"t{i}")
        await store.put_message(m, enc(m))
        await store.put_part(t, enc(t))
    await store.window("s")  # read from SQLite: cached from here
    marker = UserMessage(id="m3", session_id="s", time=MessageTime(created=30))
    summary = UserMessage(id="m4", session_id="s", time=MessageTime(created=40))
    text = TextPart(id="p4", session_id="s", message_id="m4", text="summary")
    await store.put_many([(marker, enc(marker)), (summary, enc(summary))], [(text, enc(text))])
    misses = store.cache.misses
    await _check(store, "s")
    start = Key(30, "m3")
    await _check(store, "s", start)
    assert store.cache.misses == misses
    cached = store.cached_newest_first("s")
    assert cached is not None and cached[0] == start
    assert [m.info.id for m in cached[1]] == ["m4", "m3"]
    # an earlier start than the entry's goes back to SQLite, and is exact
    await _check(store, "s", Key(20, "m2"))
    assert store.cache.misses == misses + 1


async def test_a_cached_window_reassembles_only_the_messages_written_since(store: Store) -> None:
    await store.put_session(Session(id="s", title="", time=SessionTime(created=1, updated=1)))
    for i in (1, 2):
        m = UserMessage(id=f"m{i}", session_id="s", time=MessageTime(created=10 * i))
        await store.put_message(m, enc(m))
    await store.window("s")
    first = await store.window("s")
    part = TextPart(id="p1", session_id="s", message_id="m2", text="new")
    await store.put_part(part, enc(part))
    second = await store.window("s")
    assert second[0] is first[0]  # untouched: the same object, not assembled again
    assert second[1] is not first[1] and [p.id for p in second[1].parts] == ["p1"]
    await _check(store, "s")


async def test_a_read_with_its_stored_json_gets_the_same_shared_messages(store: Store) -> None:
    """The ``parts`` format reads the stored JSON beside the window (``raws``): served from the
    cache, it gets the cache's shared messages, the same objects as a read without it (the
    renderers remember a message by its identity), and the JSON SQLite holds."""
    await store.put_session(Session(id="s", title="", time=SessionTime(created=1, updated=1)))
    m = UserMessage(id="m1", session_id="s", time=MessageTime(created=10))
    await store.put_message(m, enc(m) + b" ")  # stored as sent, spacing included
    part = TextPart(id="p1", session_id="s", message_id="m1", text="hello")
    await store.put_part(part, enc(part))
    await store.window("s")  # from SQLite: cached
    plain = await store.window("s")
    raws: dict[str, str] = {}
    with_json = await store.window("s", raws=raws)
    assert [a is b for a, b in zip(with_json, plain, strict=True)] == [True]
    fresh: dict[str, str] = {}
    await store.window("s", None, FAR, raws=fresh)  # an explicit end: a fresh SQLite read
    assert raws == fresh and raws["m1"].endswith(" ") and set(raws) == {"m1", "p1"}


async def test_only_one_sessions_window_is_kept_assembled(store: Store) -> None:
    """The assembled messages (decoded Structs) are kept for the session read last only, so
    what they hold stays within one window, whatever the number of cached sessions."""
    for sid in ("s", "t"):
        await store.put_session(Session(id=sid, title="", time=SessionTime(created=1, updated=1)))
        m = UserMessage(id=f"{sid}-m", session_id=sid, time=MessageTime(created=10))
        await store.put_message(m, enc(m))
        await store.window(sid)  # read from SQLite: cached
    first = await store.window("s")
    assert (await store.window("s"))[0] is first[0]
    await store.window("t")
    again = await store.window("s")
    assert again[0] is not first[0]
    await _check(store, "s")


def test_the_remembered_point_reads_stay_bounded() -> None:
    """Each compaction gives a session a new boundary, made of new rows that are watched: what
    is remembered and watched is let go past a bound, however many there were."""
    cache = WindowCache()
    for i in range(20_000):
        version = cache.memo_version("s", ("boundary", None))
        cache.remember("s", ("boundary", None), version, i, made_of=(f"m{i}", f"p{i}", f"s{i}"))
        assert cache.recall("s", ("boundary", None)) == i
    assert len(cache._bound_ids) <= 3 * 4096 and len(cache._memo) <= 4096


def test_a_read_that_raced_with_a_write_is_not_cached() -> None:
    cache = WindowCache()
    version = cache.version("s")
    cache.message_written("s", Key(1, "m"), "{}")  # a write lands while the read runs
    cache.put("s", None, version, [], [])
    assert not cache.holds("s", None)


ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["msg", "part", "repart", "rmpart", "rmmsg", "retime", "compact", "many", "advance"]
        ),
        st.integers(0, 5),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=ops, window_from=st.integers(0, 3))
# A message from before the window, with a part, moved into it by a new time (once missed).
@example(ops=[("msg", 1, 0), ("part", 1, 0), ("retime", 1, 3)], window_from=1)
async def test_random_writes_never_make_the_cache_diverge(
    store: Store, ops: list[tuple[str, int, int]], window_from: int
) -> None:
    sid = f"s{abs(hash((tuple(ops), window_from)))}"
    await store.put_session(Session(id=sid, title="", time=SessionTime(created=1, updated=1)))
    start = Key(window_from * 10, "")
    await store.window(sid, start)  # prime the cache
    for op, a, b in ops:
        mid, pid = f"{sid}-m{a}", f"{sid}-p{a}-{b}"
        if op == "msg" or op == "retime":
            created = a * 7 + (b if op == "retime" else 0)
            m = UserMessage(id=mid, session_id=sid, time=MessageTime(created=created))
            await store.put_message(m, enc(m))
        elif op in ("part", "repart") and await store.get_message(mid):
            text = f"{op}-{b}"
            if b % 2:
                p = TextPart(id=pid, session_id=sid, message_id=mid, text=text)
            else:
                p = ToolPart(  # type: ignore[assignment]
                    id=pid,
                    session_id=sid,
                    message_id=mid,
                    call_id=pid,
                    tool="t",
                    state=ToolCompleted(input={}, output=text, time=ToolTime(start=1, end=2)),
                )
            await store.put_part(p, enc(p))
        elif op == "rmpart":
            await store.remove_part(sid, mid, pid)
        elif op == "rmmsg":
            await store.remove_message(sid, mid)
        elif op == "compact":
            await store.mark_compacted([pid], 5)
        elif op == "many":  # a compaction's batch: a new message and a part of it
            m = UserMessage(id=mid, session_id=sid, time=MessageTime(created=a * 7 + b))
            p = TextPart(id=pid, session_id=sid, message_id=mid, text=f"many-{b}")
            with contextlib.suppress(Conflict):
                await store.put_many([(m, enc(m))], [(p, enc(p))])
        elif op == "advance":  # the window now starts later (a new compaction boundary)
            start = max(start, Key(a * 7, ""))
        await _check(store, sid, start)


async def test_a_merged_batch_with_a_conflicting_row_fails_it_alone_and_keeps_the_cache_exact(
    store: Store,
) -> None:
    import asyncio

    for sid in ("s", "o"):
        await store.put_session(Session(id=sid, title="", time=SessionTime(created=1, updated=1)))
    owned = UserMessage(id="m0", session_id="o", time=MessageTime(created=1))
    await store.put_message(owned, enc(owned))
    await store.window("s")  # cached, empty
    batch = [UserMessage(id=f"m{i}", session_id="s", time=MessageTime(created=i)) for i in range(5)]
    # m0 belongs to session "o": its row fails the merged batch, which is replayed op by op
    outcomes = await asyncio.gather(
        *(store.put_message(m, enc(m)) for m in batch), return_exceptions=True
    )
    assert isinstance(outcomes[0], Conflict) and outcomes[1:] == [None] * 4
    await _check(store, "s")
    assert [m.info.id for m in await store.window("s")] == ["m1", "m2", "m3", "m4"]


def test_the_decode_cache_is_bounded_by_the_text_it_holds_and_never_stale() -> None:
    decodes: list[str] = []

    def decode(data: str) -> str:
        decodes.append(data)
        return data.upper()

    cache = Decoded(decode, max_bytes=10_000)
    texts = {f"p{i}": f"{i:04d}" * 500 for i in range(12)}  # 2,000 characters each
    for key, text in texts.items():
        assert cache(key, text) == text.upper()
    assert cache.held_bytes <= 10_000
    # The newest five are held: served again without decoding; the oldest was dropped.
    decodes.clear()
    for key in list(texts)[-5:]:
        cache(key, texts[key])
    assert decodes == []
    cache("p0", texts["p0"])
    assert decodes == [texts["p0"]]
    # A use keeps an entry: p8, used once more, outlives p9 to p11 and p0, which were not.
    cache("p8", texts["p8"])
    for i in range(12, 16):
        cache(f"p{i}", f"{i:04d}" * 500)
    decodes.clear()
    cache("p8", texts["p8"])
    assert decodes == []
    # A changed text under a known id is decoded again, never served stale.
    assert cache("p8", "changed") == "CHANGED"
    assert decodes == ["changed"]
    # A text larger than the whole bound is decoded, not kept.
    big = "x" * 20_000
    assert cache("big", big) == big.upper()
    assert cache.held_bytes <= 10_000


async def test_a_commit_by_another_daemon_during_a_window_read_is_no_error(
    db: object, store: Store
) -> None:
    """Issue 32 item 10: a second daemon on the same database (here a second ``Store``)
    commits a compaction's messages and parts while a window read is under way. The read
    used to take its messages and its parts in two statements, two snapshots: the parts of
    a message the first never saw reached ``WindowCache.put`` (``KeyError``, -32603 on
    ``session/context``). The read sees one snapshot, and the next one sees the commit."""
    other = await Store.open(db)  # type: ignore[arg-type]
    try:
        await store.put_session(Session(id="s", title="", time=SessionTime(created=1, updated=1)))
        m1 = UserMessage(id="m1", session_id="s", time=MessageTime(created=10))
        p1 = TextPart(id="p1", session_id="s", message_id="m1", text="a")
        await store.put_many([(m1, enc(m1))], [(p1, enc(p1))])
        m2 = UserMessage(id="m2", session_id="s", time=MessageTime(created=20))
        p2 = TextPart(id="p2", session_id="s", message_id="m2", text="b")
        real = store.backend.stream
        streams = 0

        def stream(sql: str, args: list[object]):  # type: ignore[no-untyped-def]
            return _after(real(sql, args))

        @contextlib.asynccontextmanager
        async def _after(inner):  # type: ignore[no-untyped-def]
            nonlocal streams
            async with inner as chunks:
                yield chunks
            streams += 1
            if streams == 1:  # the other daemon commits right after the first statement
                await other.put_many([(m2, enc(m2))], [(p2, enc(p2))])

        store.backend.stream = stream  # type: ignore[method-assign]
        try:
            first = await store.window("s")
        finally:
            store.backend.stream = real  # type: ignore[method-assign]
        assert streams >= 1
        assert _ids(first) in (
            [("m1", 10, [enc(p1)])],
            [("m1", 10, [enc(p1)]), ("m2", 20, [enc(p2)])],
        )
        await _check(store, "s")
        assert [m.info.id for m in await store.window("s")] == ["m1", "m2"]
    finally:
        await other.close()


async def test_a_read_that_raced_with_another_daemons_commit_is_not_cached(
    db: object, store: Store
) -> None:
    """A read of a session the cache does not hold yet reads a snapshot from before another
    daemon's commit; meanwhile a read of another session notices that commit and clears the
    cache (the session had no entry to drop). The first read must not store its older window
    after that clear: the cache would serve it, missing the commit, until the next one."""
    other = await Store.open(db)  # type: ignore[arg-type]
    try:
        for sid in ("s", "o"):
            await store.put_session(
                Session(id=sid, title="", time=SessionTime(created=1, updated=1))
            )
        m1 = UserMessage(id="m1", session_id="s", time=MessageTime(created=10))
        await store.put_message(m1, enc(m1))
        m2 = UserMessage(id="m2", session_id="s", time=MessageTime(created=20))
        real = store.backend.stream

        @contextlib.asynccontextmanager
        async def _after(inner):  # type: ignore[no-untyped-def]
            async with inner as chunks:
                yield chunks
            store.backend.stream = real  # type: ignore[method-assign]
            await other.put_message(m2, enc(m2))  # committed after the snapshot was read
            await store.window("o")  # another read notices it, first

        store.backend.stream = lambda sql, args: _after(real(sql, args))  # type: ignore[method-assign]
        try:
            await store.window("s")
        finally:
            store.backend.stream = real  # type: ignore[method-assign]
        assert [m.info.id for m in await store.window("s")] == ["m1", "m2"]
        await _check(store, "s")
    finally:
        await other.close()


async def test_a_read_inside_an_older_snapshot_is_not_cached(store: Store) -> None:
    """SQLite's reads share one connection: a statement that begins while another one is
    still being read joins its read transaction, and sees the database as it was when that
    one began, even a write of our own committed since. Such a window is served (it is a
    consistent state) but never cached: the cache would keep serving it without the write."""
    await store.put_session(Session(id="s", title="", time=SessionTime(created=1, updated=1)))
    m1 = UserMessage(id="m1", session_id="s", time=MessageTime(created=10))
    await store.put_message(m1, enc(m1))
    async with store.backend.stream("SELECT id FROM messages", []):  # a page being read
        m2 = UserMessage(id="m2", session_id="s", time=MessageTime(created=20))
        await store.put_message(m2, enc(m2))
        await store.window("s")  # read while the other statement holds its snapshot
    assert [m.info.id for m in await store.window("s")] == ["m1", "m2"]
    await _check(store, "s")
